package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// The replicas' ids, as HelloAck names them and podium.nodes.session_replica
// stores them.
const (
	replicaA = "replica-a"
	replicaB = "replica-b"
)

// result is one fleet size's failover.
type result struct {
	Nodes, Tasks int
	Batch        int // nodes started at once on the way onto A
	// ColdConnect is the reference: the same fleet connecting to replica A
	// from nothing, every node at once, in the same run.
	ColdConnect time.Duration
	ColdAll     bool
	// After the SIGKILL of A: when the first and the last node had its
	// HelloAck from B (node side), and when podium.nodes showed every node
	// online on B.
	First, Last, StoredAll time.Duration
	RehomeP50, RehomeP99   time.Duration
	Rehomed                int // nodes on B at the end of the wait
	StreamsLost            int // streams that ended, every node together
	// The leader: B's "now the leader" log line, and the first node's
	// Assign of the task submitted to B right after the kill.
	LeaderAt, ProbePlaced time.Duration
	ProbeErr              error
	// The tasks that ran across the switch.
	Succeeded, Requeued, Moved int
	LinesWritten, LinesStored  int
	LogsExact, LogsWrong       int
	WrongSample                []string
	// What B did during the switch.
	BCPU                 float64 // % of one core, kill → every node on B
	PGCPU                float64
	Top                  []benchkit.Statement
	Warnings             int
	WarnSample           []string
	Profile, ProfileText string
	Goroutines           string
}

// measure runs one fleet size: a fresh database, replicas A and B, the nodes
// on A with tasks running, then A killed.
func measure(ctx context.Context, log *slog.Logger, cfg config, setup *benchkit.Setup, n int) (r result, err error) {
	r.Nodes, r.Tasks, r.Batch = n, cfg.tasks, min(n, cfg.batch)
	if cfg.batch <= 0 {
		r.Batch = n
	}
	db, err := benchkit.OpenStatsDB(ctx, setup.Cluster, fmt.Sprintf("failover_%d", n))
	if err != nil {
		return r, err
	}
	defer db.Close()
	creds, err := db.InsertNodes(ctx, n, 0)
	if err != nil {
		return r, err
	}
	work := func(name string) string {
		ext := filepath.Ext(name)
		return filepath.Join(setup.Work, fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), n, ext))
	}

	coordURL := db.URL
	if cfg.poolMaxConns > 0 {
		sep := "?"
		if strings.Contains(coordURL, "?") {
			sep = "&"
		}
		coordURL += fmt.Sprintf("%spool_max_conns=%d", sep, cfg.poolMaxConns)
	}
	log.Info("starting replica A", "nodes", n)
	a, err := benchkit.StartCoordinator(ctx, setup.Bin, coordURL, work("coordinator-a.log"), nil, "--replica-id", replicaA)
	if err != nil {
		return r, err
	}
	defer func() { _ = a.Stop(5 * time.Second) }() // killed by then; this closes its log
	// A leads before B starts, so that the kill takes the leader too.
	if _, err := waitLogLine(ctx, a.LogPath, "this replica is now the leader", 30*time.Second); err != nil {
		return r, fmt.Errorf("replica A: %w", err)
	}
	debugPort, err := benchkit.FreePort()
	if err != nil {
		return r, err
	}
	debugAddr := "127.0.0.1:" + strconv.Itoa(debugPort)
	b, err := benchkit.StartCoordinator(ctx, setup.Bin, coordURL, work("coordinator-b.log"), nil,
		"--replica-id", replicaB, "--debug-listen", debugAddr)
	if err != nil {
		return r, err
	}
	defer b.Shutdown(log)

	nodeLog, err := os.Create(work("nodes.log"))
	if err != nil {
		return r, err
	}
	defer nodeLog.Close()
	f, err := newFleet(log, a.URL, creds, cfg.logEach, nodeLog)
	if err != nil {
		return r, err
	}
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := f.run(fctx, cfg.batch)
	defer func() { stopFleet(); <-fleetDone }()
	began := time.Now()
	r.ColdAll = waitFor(ctx, cfg.connectTimeout, func() bool { c, _, _ := f.connectedTo(replicaA); return c == n })
	r.ColdConnect = time.Since(began)
	if !r.ColdAll {
		c, _, _ := f.connectedTo(replicaA)
		return r, fmt.Errorf("only %d of %d nodes connected to replica A within %s; see %s", c, n, cfg.connectTimeout, nodeLog.Name())
	}
	log.Info("fleet on replica A", "nodes", n, "took", r.ColdConnect.Round(time.Millisecond))

	tasksA := taskClient(a.URL)
	var ids []string
	for range cfg.tasks {
		res, err := tasksA.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
		if err != nil {
			return r, fmt.Errorf("submit to replica A: %w", err)
		}
		ids = append(ids, res.Msg.GetTask().GetId())
	}
	if !waitFor(ctx, 60*time.Second, func() bool { return f.starts.Load() >= int64(cfg.tasks) }) {
		return r, fmt.Errorf("only %d of %d tasks started on the nodes within 60s", f.starts.Load(), cfg.tasks)
	}
	log.Info("tasks running; they write a line every "+cfg.logEach.String(), "tasks", cfg.tasks)
	if benchkit.Sleep(ctx, cfg.before) != nil {
		return r, ctx.Err()
	}

	// The switch.
	if err := db.ResetStatements(ctx); err != nil {
		return r, err
	}
	pgPID, _ := benchkit.PostmasterPID(filepath.Join(setup.Cluster.SocketDir, "data"))
	pgBefore := benchkit.TreeCPU(pgPID)
	bBefore, _ := benchkit.ProcCPU(b.PID)
	profileDone := make(chan error, 1)
	if cfg.profile > 0 {
		r.Profile = work("replica-b.pprof")
		go func() { profileDone <- benchkit.CPUProfile(ctx, debugAddr, cfg.profile, r.Profile) }()
	}
	log.Info("SIGKILL replica A", "pid", a.PID)
	t0 := time.Now()
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		return r, fmt.Errorf("kill replica A: %w", err)
	}
	tasksB := taskClient(b.URL)
	probe := make(chan string, 1)
	go func() {
		// B serves the API throughout; a new task is submitted there at once
		// and placed by whichever replica leads.
		for ctx.Err() == nil {
			res, err := tasksB.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
			if err == nil {
				probe <- res.Msg.GetTask().GetId()
				return
			}
			r.ProbeErr = err
			_ = benchkit.Sleep(ctx, 50*time.Millisecond)
		}
		close(probe)
	}()

	goroutines := make(chan string, 1)
	go func() {
		// Where B's stream handlers wait while the fleet arrives.
		if benchkit.Sleep(ctx, cfg.snapshot) != nil {
			goroutines <- ""
			return
		}
		goroutines <- goroutineSummary(ctx, debugAddr, work("replica-b-goroutines.txt"))
	}()
	storedAll := func() bool {
		var c int
		err := db.Conn.QueryRow(ctx, `select count(*) from podium.nodes where session_replica = $1 and status = 'online'`, replicaB).Scan(&c)
		return err == nil && c == n
	}
	allOnB := waitFor(ctx, cfg.rehomeTimeout, func() bool { c, _, _ := f.connectedTo(replicaB); return c == n })
	window := time.Since(t0)
	bAfter, _ := benchkit.ProcCPU(b.PID)
	r.BCPU = 100 * (bAfter - bBefore).Seconds() / window.Seconds()
	r.PGCPU = 100 * benchkit.TreeCPU(pgPID).Since(pgBefore).Seconds() / window.Seconds()
	if allOnB && waitFor(ctx, cfg.rehomeTimeout, storedAll) {
		r.StoredAll = time.Since(t0)
	}
	var first, last time.Time
	r.Rehomed, first, last = f.connectedTo(replicaB)
	if r.Rehomed > 0 {
		r.First, r.Last = first.Sub(t0), last.Sub(t0)
		rt := f.sinceTimes(replicaB, t0)
		slices.Sort(rt)
		r.RehomeP50, r.RehomeP99 = rt[len(rt)/2], rt[min(len(rt)-1, len(rt)*99/100)]
	}
	if sts, err := db.Statements(ctx); err == nil {
		slices.SortFunc(sts, func(x, y benchkit.Statement) int { return int(y.Ms - x.Ms) })
		r.Top = sts[:min(len(sts), 8)]
	}
	log.Info("nodes on replica B", "nodes", r.Rehomed, "of", n, "last", r.Last.Round(time.Millisecond))

	r.Goroutines = <-goroutines
	probeID := <-probe
	if probeID != "" {
		ids = append(ids, probeID)
		if waitFor(ctx, 60*time.Second, func() bool { _, ok := f.task(probeID); return ok }) {
			t, _ := f.task(probeID)
			r.ProbePlaced = t.started.Sub(t0)
			r.ProbeErr = nil
		}
	}
	if at, err := waitLogLine(ctx, b.LogPath, "this replica is now the leader", 30*time.Second); err == nil {
		r.LeaderAt = at.Sub(t0)
	}

	// The tasks go on writing on B for a while, then end.
	if benchkit.Sleep(ctx, cfg.after) != nil {
		return r, ctx.Err()
	}
	f.endTasks()
	if err := verify(ctx, tasksB, f, ids, &r); err != nil {
		return r, err
	}
	r.StreamsLost = f.drops()
	r.Warnings, r.WarnSample = b.Warnings()
	if cfg.profile > 0 {
		if err := <-profileDone; err != nil {
			log.Warn("no CPU profile of replica B", "err", err)
			r.Profile = ""
		} else {
			r.ProfileText = pprofTop(ctx, setup.Bin, r.Profile)
		}
	}
	return r, nil
}

// verify waits for every task to end and compares each one's stored log with
// what its node wrote, byte for byte, through the API a user reads logs with.
func verify(ctx context.Context, c podiumv1connect.TaskServiceClient, f *fleet, ids []string, r *result) error {
	// One deadline for them all: a fleet that never reached B leaves its
	// tasks unfinished, and that is reported, not waited out task by task.
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		var task *podiumv1.Task
		ok := waitFor(ctx, time.Until(deadline), func() bool {
			res, err := c.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
			if err != nil {
				return false
			}
			task = res.Msg.GetTask()
			return terminal(task.GetState())
		})
		if !ok {
			r.WrongSample = append(r.WrongSample, fmt.Sprintf("%s had not ended 2 min after the tasks were told to (state %s)", id, task.GetState()))
			r.LogsWrong++
			continue
		}
		if task.GetState() == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			r.Succeeded++
		}
		if task.GetAttempt() != 1 {
			r.Requeued++
		}
		run, ran := f.task(id)
		if ran && task.GetNodeId() != run.node {
			r.Moved++
		}
		stored, err := storedLog(ctx, c, id)
		if err != nil {
			return fmt.Errorf("read the log of %s: %w", id, err)
		}
		var wrote []byte
		if ran {
			wrote = run.output()
		}
		r.LinesWritten += bytes.Count(wrote, []byte("\n"))
		r.LinesStored += bytes.Count(stored, []byte("\n"))
		if bytes.Equal(stored, wrote) {
			r.LogsExact++
			continue
		}
		r.LogsWrong++
		if len(r.WrongSample) < 5 {
			r.WrongSample = append(r.WrongSample, fmt.Sprintf("%s: wrote %d bytes, stored %d (%s)", id, len(wrote), len(stored), firstDiff(wrote, stored)))
		}
	}
	return nil
}

// storedLog is a task's stdout as the coordinator serves it: the log chunks
// of its events, in order.
func storedLog(ctx context.Context, c podiumv1connect.TaskServiceClient, id string) ([]byte, error) {
	st, err := c.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []byte
	for st.Receive() {
		if l := st.Msg().GetEvent().GetLog(); l != nil {
			out = append(out, l.GetData()...)
		}
	}
	return out, st.Err()
}

func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return fmt.Sprintf("first difference at byte %d", i)
}

func terminal(s podiumv1.TaskState) bool {
	switch s {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
		return true
	}
	return false
}

// waitFor polls cond every 10 ms until it holds (true) or within has passed
// or ctx ended (false).
func waitFor(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || benchkit.Sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
}

// waitLogLine waits for a line containing msg in a coordinator's log and
// returns the time the line carries (slog's text time=).
func waitLogLine(ctx context.Context, path, msg string, within time.Duration) (time.Time, error) {
	var at time.Time
	found := waitFor(ctx, within, func() bool {
		fh, err := os.Open(path)
		if err != nil {
			return false
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, msg) {
				continue
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				at = t
				return true
			}
		}
		return false
	})
	if !found {
		return at, fmt.Errorf("no %q in %s within %s", msg, path, within)
	}
	return at, nil
}

// goroutineSummary saves replica B's goroutines (pprof's grouped text) to
// path and returns the groups of more than ten whose stack passes through
// Podium's code, largest first, each as its count and the Podium frames in it.
func goroutineSummary(ctx context.Context, addr, path string) string {
	b, err := benchkit.DebugGet(ctx, addr, "/debug/pprof/goroutine?debug=1", time.Minute)
	if err != nil {
		return err.Error()
	}
	_ = os.WriteFile(path, b, 0o644)
	type group struct {
		n      int
		frames []string
	}
	var groups []group
	for _, block := range strings.Split(string(b), "\n\n") {
		head, rest, _ := strings.Cut(block, "\n")
		count, _, _ := strings.Cut(head, " @ ")
		c, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || c <= 10 {
			continue
		}
		g := group{n: c}
		for _, l := range strings.Split(rest, "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && strings.HasPrefix(f[0], "#") && strings.Contains(f[2], "podium/") && len(g.frames) < 4 {
				g.frames = append(g.frames, f[2][strings.LastIndex(f[2], "/")+1:])
			}
		}
		if len(g.frames) > 0 {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(x, y group) int { return y.n - x.n })
	var out strings.Builder
	for _, g := range groups[:min(len(groups), 8)] {
		fmt.Fprintf(&out, "%6d  %s\n", g.n, strings.Join(g.frames, " < "))
	}
	return out.String()
}

// pprofTop is the profile's heaviest functions (cumulative), as go tool pprof
// prints them.
func pprofTop(ctx context.Context, bin, profile string) string {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=25", bin, profile).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v\n%s", err, out)
	}
	return string(out)
}

// taskClient is a TaskService client that sends the bearer token, as the
// podium CLI does.
func taskClient(url string) podiumv1connect.TaskServiceClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+benchkit.APIToken)
			return next(ctx, req)
		}
	})
	streamAuth := connect.WithInterceptors(auth, streamToken{})
	return podiumv1connect.NewTaskServiceClient(&http.Client{Transport: &http.Transport{Protocols: &p}}, url, streamAuth)
}

// streamToken adds the bearer token to streaming calls (Events), which a
// UnaryInterceptorFunc does not see.
type streamToken struct{}

func (streamToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (streamToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, s)
		conn.RequestHeader().Set("Authorization", "Bearer "+benchkit.APIToken)
		return conn
	}
}

func (streamToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
