package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// result is everything one run measured.
type result struct {
	PGSettings [][2]string

	// The ingest: Bytes of output in Tasks tasks, from the first event made
	// to the last terminal event acknowledged.
	Tasks      int
	Bytes      int64
	Elapsed    time.Duration
	Exact, Bad int      // tasks read back byte-exact, and not
	BadSample  []string // why, for a few
	ReadBack   time.Duration
	CoordCPU   time.Duration
	PGCPU      time.Duration
	BenchCPU   time.Duration
	PeakRSS    int64 // KiB, sampled during the ingest
	EventsSize int64 // bytes of podium.task_events (with TOAST and indexes) after it
	Statements []benchkit.Statement
	Profile    string
	Conns      int
	NodeErrs   map[string]int
	Warnings   int
	WarnSample []string

	// COPY of the same chunks.
	CopyBytes   int64
	CopyElapsed time.Duration
	CopyPGCPU   time.Duration
	CopySize    int64
	// CopyStatements are what the COPY reference ran, from the same view.
	CopyStatements []benchkit.Statement

	// podium run of one task printing cfg.runOutput bytes, and podium logs of
	// its stored log.
	Run, Logs cliRun
	// RunStored is from the first event of podium run's task to its last
	// acknowledged, on its node: how fast its one node could store it.
	RunStored time.Duration
}

// cliRun is one run of the podium CLI with its stdout read through a pipe.
type cliRun struct {
	Done      bool
	Err       string
	Bytes     int64
	Exact     bool
	Total     time.Duration // process start to exit
	FirstByte time.Duration // process start to the first byte on stdout
	CPU       time.Duration // the CLI's own user+system time
	CoordCPU  time.Duration
	PGCPU     time.Duration
}

// Delivery is the MB/s from the first byte to the last: what the pipe saw
// once output was flowing.
func (c cliRun) Delivery() float64 { return mbps(c.Bytes, c.Total-c.FirstByte) }

func measure(ctx context.Context, log *slog.Logger, cfg config, setup *benchkit.Setup) (result, error) {
	var r result
	c := newCorpus()
	db, err := benchkit.OpenStatsDB(ctx, setup.Cluster, "ingest")
	if err != nil {
		return r, err
	}
	defer db.Close()
	if r.PGSettings, err = pgSettings(ctx, db.Conn); err != nil {
		return r, err
	}
	creds, err := db.InsertNodes(ctx, cfg.nodes, int32(cfg.perNode))
	if err != nil {
		return r, err
	}
	pgPID, err := benchkit.PostmasterPID(filepath.Join(setup.Cluster.SocketDir, "data"))
	if err != nil {
		return r, err
	}
	debugPort, err := benchkit.FreePort()
	if err != nil {
		return r, err
	}
	debugAddr := "127.0.0.1:" + strconv.Itoa(debugPort)
	coord, err := benchkit.StartCoordinator(ctx, setup.Bin, db.URL, filepath.Join(setup.Work, "coordinator.log"), nil,
		"--debug-listen", debugAddr)
	if err != nil {
		return r, err
	}
	defer coord.Shutdown(log)

	f := newFlood(coord.URL, creds, cfg, c)
	r.Conns = f.Conns()
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := f.Start(fctx)
	defer func() { stopFleet(); <-fleetDone }()
	select {
	case <-f.AllUp():
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(time.Minute):
		return r, fmt.Errorf("%d of %d nodes connected within a minute; see %s", f.Connected.Load(), cfg.nodes, coord.LogPath)
	}
	api := taskClient(coord.URL)

	if err := ingest(ctx, log, cfg, &r, f, api, db, coord, pgPID, debugAddr, setup.Work); err != nil {
		return r, err
	}
	r.NodeErrs = f.ErrSamples()
	r.Warnings, r.WarnSample = coord.Warnings()
	if err := verify(ctx, &r, f.finishedSoFar(), api); err != nil {
		return r, err
	}
	if err := copyReference(ctx, log, cfg, &r, c, f.finishedSoFar(), db, pgPID); err != nil {
		return r, err
	}
	if cfg.podium != "" {
		cliFigures(ctx, log, cfg, &r, f, coord, pgPID)
	}
	return r, nil
}

// pgSettings records what the server runs with, for the report.
func pgSettings(ctx context.Context, conn *pgx.Conn) ([][2]string, error) {
	rows, err := conn.Query(ctx, `select name, setting || coalesce(unit, '') from pg_settings
		where name = any($1) order by name`,
		[]string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_wal_size",
			"default_toast_compression", "server_version"})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var kv [2]string
		err := row.Scan(&kv[0], &kv[1])
		return kv, err
	})
}

// ingest submits every task, waits until each has printed its output and
// had its end acknowledged, and measures what that cost.
func ingest(ctx context.Context, log *slog.Logger, cfg config, r *result, f *flood, api podiumv1connect.TaskServiceClient,
	db *benchkit.StatsDB, coord *benchkit.Coordinator, pgPID int, debugAddr, work string) error {
	r.Tasks = cfg.nodes * cfg.perNode
	if err := db.ResetStatements(ctx); err != nil {
		return err
	}
	coordBefore, _ := benchkit.ProcCPU(coord.PID)
	pgBefore := benchkit.TreeCPU(pgPID)
	selfBefore := benchkit.SelfCPU()

	log.Info("submitting", "tasks", r.Tasks, "output each", cfg.output)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for range r.Tasks {
		g.Go(func() error {
			_, err := api.Submit(gctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("submit: %w", err)
	}

	profDone := make(chan string, 1)
	if cfg.profile {
		// A profile of the middle of the ingest, not of its ramp-up.
		secs := max(1, int(float64(cfg.output*int64(r.Tasks))/(30<<20)/2))
		go func() { profDone <- profile(ctx, debugAddr, secs, filepath.Join(work, "coordinator.pprof")) }()
	} else {
		profDone <- ""
	}

	last, lastAt := 0, time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, err := benchkit.ProcMem(coord.PID); err == nil {
			r.PeakRSS = max(r.PeakRSS, m.RSSKiB)
		}
		n := len(f.finishedSoFar())
		if n >= r.Tasks {
			break
		}
		if n > last {
			last, lastAt = n, time.Now()
			log.Info("progress", "finished", n, "of", r.Tasks)
		}
		if time.Since(lastAt) > cfg.stall {
			return fmt.Errorf("no task finished for %s (%d of %d done); see %s", cfg.stall, n, r.Tasks, coord.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	coordAfter, _ := benchkit.ProcCPU(coord.PID)
	r.CoordCPU = coordAfter - coordBefore
	r.PGCPU = benchkit.TreeCPU(pgPID).Since(pgBefore)
	r.BenchCPU = benchkit.SelfCPU() - selfBefore
	var endAt time.Time
	for _, t := range f.finishedSoFar() {
		r.Bytes += t.bytes
		if t.ackedAll.After(endAt) {
			endAt = t.ackedAll
		}
	}
	r.Elapsed = endAt.Sub(time.Unix(0, f.firstAt.Load()))
	var err error
	if r.Statements, err = db.Statements(ctx); err != nil {
		return err
	}
	if err := db.Conn.QueryRow(ctx, "select pg_total_relation_size('podium.task_events')").Scan(&r.EventsSize); err != nil {
		return err
	}
	r.Profile = <-profDone
	return nil
}

// profile takes a CPU profile of the coordinator for secs seconds and returns
// the top of it, as go tool pprof prints it.
func profile(ctx context.Context, debugAddr string, secs int, path string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, secs), nil)
	if err != nil {
		return err.Error()
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "profile: " + err.Error()
	}
	defer res.Body.Close()
	out, err := os.Create(path)
	if err != nil {
		return err.Error()
	}
	if _, err := io.Copy(out, res.Body); err != nil {
		out.Close()
		return "profile: " + err.Error()
	}
	out.Close()
	return pprofTop(ctx, path)
}

// verify reads every task's log back through the API and compares its
// SHA-256, and its offsets, with what the node printed.
func verify(ctx context.Context, r *result, done []finished, api podiumv1connect.TaskServiceClient) error {
	began := time.Now()
	for _, t := range done {
		sum, n, err := readLog(ctx, api, t.id)
		switch {
		case err != nil:
			r.Bad++
			r.BadSample = append(r.BadSample, fmt.Sprintf("%s: %v", t.id, err))
		case n != t.bytes || sum != t.sum:
			r.Bad++
			r.BadSample = append(r.BadSample, fmt.Sprintf("%s: read %d bytes back, %x…; the node printed %d, %x…", t.id, n, sum[:6], t.bytes, t.sum[:6]))
		default:
			r.Exact++
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	r.ReadBack = time.Since(began)
	if len(r.BadSample) > 5 {
		r.BadSample = r.BadSample[:5]
	}
	return nil
}

// readLog is a task's stdout as the API serves it, checked for gaps.
func readLog(ctx context.Context, api podiumv1connect.TaskServiceClient, id string) (sum [sha256.Size]byte, n int64, err error) {
	st, err := api.Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		return sum, 0, err
	}
	defer st.Close()
	h := sha256.New()
	for st.Receive() {
		l := st.Msg().GetEvent().GetLog()
		if l == nil {
			continue
		}
		if l.GetOffset() != uint64(n) {
			return sum, n, fmt.Errorf("a chunk at offset %d after %d bytes", l.GetOffset(), n)
		}
		h.Write(l.GetData())
		n += int64(len(l.GetData()))
	}
	if err := st.Err(); err != nil {
		return sum, n, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, n, nil
}

// copyReference COPYs the chunks the tasks printed into a table of the same
// shape as podium.task_events, one connection per node, each COPY its own
// transaction of cfg.copyRows rows.
func copyReference(ctx context.Context, log *slog.Logger, cfg config, r *result, c *corpus, done []finished, db *benchkit.StatsDB, pgPID int) error {
	if _, err := db.Conn.Exec(ctx, `create table public.copy_events (like podium.task_events including all)`); err != nil {
		return fmt.Errorf("create the COPY reference's table: %w", err)
	}
	ords := make([]int64, len(done))
	// The same bytes as the tasks printed: their corpus windows.
	for i := range done {
		ords[i] = int64(i + 1)
	}
	log.Info("COPY reference", "connections", cfg.nodes, "rows per COPY", cfg.copyRows)
	// The connections stay open until Postgres's CPU is read: a backend that
	// has exited is not counted.
	conns := make([]*pgx.Conn, cfg.nodes)
	for w := range conns {
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		conns[w] = conn
	}
	if err := db.ResetStatements(ctx); err != nil {
		return err
	}
	pgBefore := benchkit.TreeCPU(pgPID)
	began := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	for w, conn := range conns {
		g.Go(func() error {
			var bytes int64
			for k := w; k < len(ords); k += cfg.nodes {
				n, err := copyTask(gctx, conn, cfg, c, ords[k])
				if err != nil {
					return fmt.Errorf("COPY: %w", err)
				}
				bytes += n
			}
			mu.Lock()
			r.CopyBytes += bytes
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	r.CopyElapsed = time.Since(began)
	r.CopyPGCPU = benchkit.TreeCPU(pgPID).Since(pgBefore)
	var err error
	if r.CopyStatements, err = db.Statements(ctx); err != nil {
		return err
	}
	return db.Conn.QueryRow(ctx, "select pg_total_relation_size('public.copy_events')").Scan(&r.CopySize)
}

// copyTask COPYs one task's output, cfg.copyRows chunks per COPY.
func copyTask(ctx context.Context, conn *pgx.Conn, cfg config, c *corpus, ordinal int64) (int64, error) {
	id := fmt.Sprintf("copy-%06d", ordinal)
	cols := []string{"task_id", "seq", "attempt", "node_seq", "at", "kind", "log_offset", "data", "state", "reason", "exit_code", "signal", "text"}
	var off int64
	seq := int64(0)
	for off < cfg.output {
		rows := 0
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"public", "copy_events"}, cols, pgx.CopyFromFunc(func() ([]any, error) {
			if rows == cfg.copyRows || off >= cfg.output {
				return nil, nil
			}
			data := c.chunk(ordinal, off, int(min(int64(cfg.chunk), cfg.output-off)))
			seq++
			row := []any{id, seq, int32(1), seq, time.Now(), "stdout", off, data, nil, nil, nil, nil, nil}
			off += int64(len(data))
			rows++
			return row, nil
		}))
		if err != nil {
			return off, err
		}
	}
	return off, nil
}

// cliFigures runs podium run of one big task, then podium logs of it.
func cliFigures(ctx context.Context, log *slog.Logger, cfg config, r *result, f *flood, coord *benchkit.Coordinator, pgPID int) {
	before := len(f.finishedSoFar())
	log.Info("podium run", "output", cfg.runOutput)
	sum := runCLI(ctx, cfg, &r.Run, coord, pgPID, "run", "--image", "busybox", "flood", strconv.FormatInt(cfg.runOutput, 10))
	var task *finished
	for _, t := range f.finishedSoFar()[before:] {
		if t.bytes == cfg.runOutput {
			task = &t
		}
	}
	if task == nil {
		if r.Run.Err == "" {
			r.Run.Err = "no node finished the task"
		}
		return
	}
	r.Run.Exact = r.Run.Done && r.Run.Bytes == task.bytes && sum == task.sum
	r.RunStored = task.ackedAll.Sub(task.began)
	log.Info("podium logs", "task", task.id)
	sum = runCLI(ctx, cfg, &r.Logs, coord, pgPID, "logs", "--quiet", task.id)
	r.Logs.Exact = r.Logs.Done && r.Logs.Bytes == task.bytes && sum == task.sum
}

// runCLI runs the podium CLI with args, reading its stdout through a pipe
// into a checksum, and fills in c.
func runCLI(ctx context.Context, cfg config, c *cliRun, coord *benchkit.Coordinator, pgPID int, args ...string) [sha256.Size]byte {
	var sum [sha256.Size]byte
	cmd := newCLI(ctx, cfg.podium, coord.URL, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.Err = err.Error()
		return sum
	}
	coordBefore, _ := benchkit.ProcCPU(coord.PID)
	pgBefore := benchkit.TreeCPU(pgPID)
	began := time.Now()
	if err := cmd.Start(); err != nil {
		c.Err = err.Error()
		return sum
	}
	h := sha256.New()
	first := make([]byte, 1)
	if n, _ := io.ReadFull(stdout, first); n == 1 {
		c.FirstByte = time.Since(began)
		h.Write(first)
		c.Bytes = 1
	}
	n, err := io.CopyBuffer(h, stdout, make([]byte, 256<<10))
	c.Bytes += n
	werr := cmd.Wait()
	c.Total = time.Since(began)
	coordAfter, _ := benchkit.ProcCPU(coord.PID)
	c.CoordCPU = coordAfter - coordBefore
	c.PGCPU = benchkit.TreeCPU(pgPID).Since(pgBefore)
	if cmd.ProcessState != nil {
		c.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	switch {
	case err != nil:
		c.Err = err.Error()
	case werr != nil:
		c.Err = fmt.Sprintf("%v: %s", werr, lastLine(cmd.Stderr))
	default:
		c.Done = true
	}
	copy(sum[:], h.Sum(nil))
	return sum
}

// taskClient is a TaskService client with the benchmark's API token.
func taskClient(url string) podiumv1connect.TaskServiceClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return podiumv1connect.NewTaskServiceClient(&http.Client{Transport: bearer{&http.Transport{Protocols: &p}}}, url)
}

// bearer adds the API token to every request, streams included.
type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+benchkit.APIToken)
	return b.next.RoundTrip(req)
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / (1 << 20) / d.Seconds()
}
