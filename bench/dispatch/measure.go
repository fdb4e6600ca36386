package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// cpuUse is CPU over a window, in % of one core: the coordinator (or, for
// the peer, River's process), Postgres (the postmaster and its children), this
// benchmark (the simulated fleet and the submitters), and the whole machine
// (/proc/stat, every process on it: on a shared machine that includes work
// that is not ours, which is why the other three are shown beside it).
type cpuUse struct {
	Coord, PG, Bench, Machine float64
	Window                    time.Duration
}

// cpuMs is a share of one core over the window spent per task, in ms.
func cpuMs(pct float64, window time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return pct / 100 * window.Seconds() * 1000 / float64(n)
}

type cpuSnap struct {
	at      time.Time
	coord   time.Duration
	pg      benchkit.CPUByPID
	self    time.Duration
	machine time.Duration
}

type probe struct {
	coordPID, pgPID int
}

func (p probe) snap() cpuSnap {
	c, _ := benchkit.ProcCPU(p.coordPID)
	return cpuSnap{at: time.Now(), coord: c, pg: benchkit.TreeCPU(p.pgPID), self: benchkit.SelfCPU(), machine: machineCPU()}
}

func (p probe) since(a cpuSnap) cpuUse {
	b := p.snap()
	return between(a, b)
}

func between(a, b cpuSnap) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return cpuUse{}
	}
	return cpuUse{
		Coord:   100 * (b.coord - a.coord).Seconds() / secs,
		PG:      100 * b.pg.Since(a.pg).Seconds() / secs,
		Bench:   100 * (b.self - a.self).Seconds() / secs,
		Machine: 100 * (b.machine - a.machine).Seconds() / secs,
		Window:  b.at.Sub(a.at),
	}
}

// machineCPU is the time every CPU of the machine has spent busy since boot:
// the first line of /proc/stat, everything but idle and iowait (guest time
// is already in user), in USER_HZ ticks of 10 ms.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// burstResult is the throughput phase: M tasks submitted as fast as the
// submitters go.
type burstResult struct {
	// Hold is set for the dispatch-only phases.
	Hold bool
	// Users is how many people submitted the tasks: 1 but in the contended
	// burst.
	Users                int
	Tasks, Conc          int
	Submitted, Errors    int
	ErrSample            string
	Assigned, Finished   int
	FirstCall            time.Time
	LastReturn           time.Time
	FirstAssign          time.Time
	LastAssign           time.Time
	LastAccept           time.Time
	EndToEnd             float64 // tasks/s, first Submit called → last Assign received
	SubmitRate           float64 // tasks/s, first Submit called → last Submit returned
	AssignRate           float64 // tasks/s, first Assign → last Assign
	AcceptRate           float64 // tasks/s, first Submit called → last PROVISIONING acked
	LatP50, LatP99, Max  time.Duration
	CPU                  cpuUse
	RTT                  rtt // first Submit → last Assign
	Stmts                statementStats
	StmtWindow           time.Duration // first Submit → every task finished
	BackgroundStmtsInWin float64       // what the idle rate predicts for that window
}

// steadyResult is the latency phase: a steady offered rate.
type steadyResult struct {
	Rate                                 float64
	Duration                             time.Duration
	Submitted, Skipped, Errors, Assigned int
	ErrSample                            string
	P50, P90, P99, Max                   time.Duration // Submit called → Assign received
	RetP50, RetP99                       time.Duration // Submit returned → Assign received
	RPCP50, RPCP99                       time.Duration // the Submit call itself
	AccP50, AccP99                       time.Duration // Assign received → PROVISIONING acked
	CPU                                  cpuUse
	RTT                                  rtt // the offered-load window
	Stmts                                statementStats
	StmtWindow                           time.Duration
	BackgroundStmtsInWin                 float64
}

// result is the whole run.
type result struct {
	Mode                   mode
	FairShare              bool
	River                  *riverResult // nil: not run
	Nodes, Conns, MaxTasks int
	ConnectTime            time.Duration
	AllConnected           bool
	RefTPS                 float64
	RefCmd                 string
	IdleStmtsPerSec        float64
	IdleTop                []benchkit.Statement
	IdleCPU                cpuUse
	IdleRTT                rtt
	Dispatch, Burst        burstResult
	// Contended is dispatch alone of tasks from cfg.users people; Users is 0
	// when it did not run.
	Contended             burstResult
	Steady                steadyResult
	PGConns               int
	PeakRSSMiB            float64
	HelloRetries, Dropped int64
	Repeats, Rejected     int64
	Cancels, Other        int64
	ErrSamples            map[string]int
	Warnings              int
	WarnSample            []string
}

func measure(ctx context.Context, log *slog.Logger, cfg config, m mode, fair bool, setup *benchkit.Setup, riverBin string) (result, error) {
	r := result{Mode: m, FairShare: fair, Nodes: cfg.nodes, MaxTasks: int(cfg.maxTasks)}
	pgPID, err := benchkit.PostmasterPID(filepath.Join(setup.Cluster.SocketDir, "data"))
	if err != nil {
		return r, err
	}
	db, err := benchkit.OpenStatsDB(ctx, setup.Cluster, dbName)
	if err != nil {
		return r, err
	}
	defer db.Close()
	creds, err := db.InsertNodes(ctx, cfg.nodes, cfg.maxTasks)
	if err != nil {
		return r, err
	}

	// The reference runs first, alone, so neither measurement disturbs the other.
	if cfg.PgbenchTime > 0 {
		log.Info("pgbench reference: insert + claim (SKIP LOCKED) + mark scheduled per transaction",
			"clients", cfg.PgbenchClients, "threads", cfg.pgbenchThreads, "for", cfg.PgbenchTime)
		if r.RefTPS, r.RefCmd, err = runPgbench(ctx, setup.Cluster, cfg, setup.Work); err != nil {
			return r, err
		}
		log.Info("pgbench reference done", "tps", r.RefTPS)
	}
	// Then the peer, alone too, on a database of its own.
	if riverBin != "" {
		rr, err := runRiver(ctx, log, cfg, riverBin, setup.Cluster, pgPID, setup.Work)
		if err != nil {
			return r, err
		}
		r.River = &rr
	}

	env := []string{"PODIUM_FAIR_SHARE=" + fmt.Sprint(fair)}
	var debugAddr string
	if cfg.coordProfile != "" {
		port, err := benchkit.FreePort()
		if err != nil {
			return r, err
		}
		debugAddr = fmt.Sprintf("127.0.0.1:%d", port)
		env = append(env, "PODIUM_DEBUG_LISTEN="+debugAddr)
	}
	coord, err := benchkit.StartCoordinator(ctx, setup.Bin, db.URL, filepath.Join(setup.Work, "coordinator.log"), env)
	if err != nil {
		return r, err
	}
	defer coord.Shutdown(log)
	log.Info("coordinator up", "pid", coord.PID, "url", coord.URL, "log", coord.LogPath)
	pr := probe{coordPID: coord.PID, pgPID: pgPID}

	tr := newTracker()
	fctx, stopFleet := context.WithCancel(ctx)
	f := newFleet(coord.URL, creds, cfg, tr)
	r.Conns = f.Conns()
	done := f.Start(fctx)
	defer func() { stopFleet(); <-done }()
	log.Info("connecting nodes", "nodes", cfg.nodes, "connections", f.Conns())
	if err := waitFor(ctx, coord, cfg.ConnectTimeout, func() bool {
		select {
		case <-f.AllUp():
			return true
		default:
			return false
		}
	}, func() { log.Info("connecting", "connected", f.Connected.Load(), "retries", f.Retries.Load()) }); err != nil && !isTimeout(err) {
		return r, err
	}
	r.ConnectTime, r.AllConnected = f.ConnectTime(), f.Connected.Load() == int64(cfg.nodes)
	log.Info("nodes connected", "connected", f.Connected.Load(), "took", r.ConnectTime.Round(time.Millisecond))

	// An idle window: what the replica runs with the fleet connected and
	// nothing to dispatch (heartbeat flushes, command polling, the scheduler's
	// tick). It is subtracted when statements are counted per task.
	probe, err := startRTTProbe(ctx, setup.Cluster)
	if err != nil {
		return r, err
	}
	defer probe.close()
	if err := db.ResetStatements(ctx); err != nil {
		return r, err
	}
	probe.take()
	idle0 := pr.snap()
	if err := benchkit.Sleep(ctx, cfg.settle); err != nil {
		return r, err
	}
	r.IdleCPU = pr.since(idle0)
	r.IdleRTT = summarize(probe.take())
	idle, err := statements(ctx, db, 6)
	if err != nil {
		return r, err
	}
	r.IdleStmtsPerSec = float64(idle.calls) / time.Since(idle0.at).Seconds()
	r.IdleTop = idle.byCalls
	log.Info("idle window", "statements/s", fmt.Sprintf("%.1f", r.IdleStmtsPerSec), "coordinator CPU %", fmt.Sprintf("%.1f", r.IdleCPU.Coord))

	client, ct := taskClient(coord.URL, benchkit.APIToken)
	defer ct.CloseIdleConnections()
	// The contended burst's people, added before anything is measured.
	var people []podiumv1connect.TaskServiceClient
	if cfg.users > 0 {
		tokens, err := addUsers(ctx, coord.URL, cfg.users)
		if err != nil {
			return r, err
		}
		for _, tok := range tokens {
			c, t := taskClient(coord.URL, tok)
			defer t.CloseIdleConnections()
			people = append(people, c)
		}
	}

	// Twice: dispatch alone (nodes accept each task and hold it until the
	// phase is measured, the scope of the pgbench reference), then with each
	// task's whole life alongside (RUNNING and SUCCEEDED shortly after).
	phases := []struct {
		into    *burstResult
		hold    bool
		clients []podiumv1connect.TaskServiceClient
	}{{&r.Dispatch, true, nil}, {&r.Burst, false, nil}}
	if len(people) > 0 {
		// Contended: the claim's fair share counts each sharer's tasks only
		// when more than one has tasks queued, which one submitter never does.
		phases = append(phases, struct {
			into    *burstResult
			hold    bool
			clients []podiumv1connect.TaskServiceClient
		}{&r.Contended, true, people})
	}
	for i, ph := range phases {
		var profiled chan struct{}
		if debugAddr != "" && i == 0 {
			profiled = make(chan struct{})
			go func() {
				defer close(profiled)
				path := cfg.coordProfile + "." + m.name
				if err := benchkit.CPUProfile(ctx, debugAddr, cfg.coordProfileTime, path); err != nil {
					log.Warn("coordinator CPU profile", "err", err)
					return
				}
				log.Info("coordinator CPU profile of the dispatch-alone burst", "file", path, "seconds", cfg.coordProfileTime.Seconds())
			}()
		}
		clients := ph.clients
		if clients == nil {
			clients = []podiumv1connect.TaskServiceClient{client}
		}
		*ph.into, err = burst(ctx, log, cfg, db, coord, pr, probe, tr, f, ph.hold, clients, r.IdleStmtsPerSec)
		if profiled != nil {
			<-profiled
		}
		if err != nil {
			return r, err
		}
		// Let the phase's last tasks finish and the queue go quiet.
		if err := waitFor(ctx, coord, cfg.drainTimeout, func() bool { return f.Held() == 0 }, nil); err != nil && !isTimeout(err) {
			return r, err
		}
		if err := benchkit.Sleep(ctx, 2*time.Second); err != nil {
			return r, err
		}
	}
	if r.Steady, err = steady(ctx, log, cfg, db, coord, pr, probe, tr, client, r.IdleStmtsPerSec); err != nil {
		return r, err
	}

	if r.PGConns, err = db.Backends(ctx); err != nil {
		return r, err
	}
	if mem, err := benchkit.ProcMem(coord.PID); err == nil {
		r.PeakRSSMiB = float64(mem.HWMKiB) / 1024
	}
	r.HelloRetries, r.Dropped = f.Retries.Load(), f.Dropped.Load()
	r.Repeats, r.Rejected, r.Cancels, r.Other = f.Repeats.Load(), f.Rejected.Load(), f.Cancels.Load(), f.Other.Load()
	r.ErrSamples = f.ErrSamples()
	r.Warnings, r.WarnSample = coord.Warnings()
	return r, nil
}

// burst submits cfg.tasks as fast as the submitters go and measures until
// the last is assigned. With hold the nodes keep each task accepted until
// then, and let them all run afterwards.
func burst(ctx context.Context, log *slog.Logger, cfg config, db *benchkit.StatsDB, coord *benchkit.Coordinator, pr probe, rp *rttProbe,
	tr *tracker, f *fleet, hold bool, clients []podiumv1connect.TaskServiceClient, idleRate float64) (burstResult, error) {
	b := burstResult{Tasks: cfg.tasks, Conc: cfg.submitters, Hold: hold, Users: len(clients)}
	if hold {
		f.hold()
	}
	defer f.release()
	if err := db.ResetStatements(ctx); err != nil {
		return b, err
	}
	assigned0, finished0 := tr.nAssigned.Load(), tr.nFinished.Load()
	rp.take()
	c0 := pr.snap()
	log.Info("throughput: submitting", "tasks", cfg.tasks, "submitters", cfg.submitters, "users", len(clients))
	// The submitters run while this goroutine watches for the last Assign, so
	// the CPU window ends when the last task is dispatched, not when the
	// check after the submitters happens to run.
	subsC := make(chan []submission, 1)
	go func() { subsC <- submitBurst(ctx, clients, cfg.tasks, cfg.submitters) }()
	var subs []submission
	err := waitFor(ctx, coord, cfg.drainTimeout+time.Duration(cfg.tasks)*10*time.Millisecond, func() bool {
		if subs == nil {
			select {
			case subs = <-subsC:
				log.Info("throughput: all submitted", "took", time.Since(c0.at).Round(time.Millisecond))
			default:
				return false
			}
		}
		return tr.nAssigned.Load()-assigned0 >= int64(countOK(subs))
	}, func() {
		log.Info("throughput: waiting", "assigned", tr.nAssigned.Load()-assigned0, "of", cfg.tasks)
	})
	if err != nil && !isTimeout(err) {
		return b, err
	}
	b.CPU = pr.since(c0)
	b.RTT = summarize(rp.take())
	if subs == nil {
		subs = <-subsC
	}

	b.Submitted = len(subs)
	var lat []time.Duration
	tr.mu.Lock()
	for _, s := range subs {
		if b.FirstCall.IsZero() || s.called.Before(b.FirstCall) {
			b.FirstCall = s.called
		}
		if s.returned.After(b.LastReturn) {
			b.LastReturn = s.returned
		}
		if s.err != nil {
			b.Errors++
			b.ErrSample = s.err.Error()
			continue
		}
		at, ok := tr.assign[s.id]
		if !ok {
			continue
		}
		b.Assigned++
		lat = append(lat, at.Sub(s.called))
		if b.FirstAssign.IsZero() || at.Before(b.FirstAssign) {
			b.FirstAssign = at
		}
		if at.After(b.LastAssign) {
			b.LastAssign = at
		}
		if acc, ok := tr.accept[s.id]; ok && acc.After(b.LastAccept) {
			b.LastAccept = acc
		}
	}
	tr.mu.Unlock()
	slices.Sort(lat)
	b.LatP50, b.LatP99, b.Max = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	if b.Assigned > 0 {
		b.EndToEnd = float64(b.Assigned) / b.LastAssign.Sub(b.FirstCall).Seconds()
		b.AssignRate = float64(b.Assigned) / b.LastAssign.Sub(b.FirstAssign).Seconds()
		if !b.LastAccept.IsZero() {
			b.AcceptRate = float64(b.Assigned) / b.LastAccept.Sub(b.FirstCall).Seconds()
		}
	}
	b.SubmitRate = float64(b.Submitted-b.Errors) / b.LastReturn.Sub(b.FirstCall).Seconds()
	log.Info("throughput: dispatched", "assigned", b.Assigned, "tasks/s", fmt.Sprintf("%.0f", b.EndToEnd), "held", hold)
	f.release()

	// Statements are counted once every task has run to the end, so each one's
	// whole life is in: submit, dispatch, delivery and its three status events.
	if err := waitFor(ctx, coord, cfg.drainTimeout, func() bool {
		return tr.nFinished.Load()-finished0 >= int64(b.Assigned)
	}, func() { log.Info("throughput: waiting for tasks to finish", "finished", tr.nFinished.Load()-finished0) }); err != nil && !isTimeout(err) {
		return b, err
	}
	b.Finished = int(tr.nFinished.Load() - finished0)
	if b.Finished < b.Assigned {
		// Say where the stragglers are, as the tables see them.
		rows, err := db.Conn.Query(ctx, "select state, reason, count(*) from podium.tasks where state <> 'succeeded' group by 1, 2 order by 3 desc limit 5")
		if err != nil {
			log.Warn("throughput: cannot read the stragglers", "err", err)
		} else {
			for rows.Next() {
				var state, reason string
				var n int
				if rows.Scan(&state, &reason, &n) == nil {
					log.Warn("throughput: tasks that did not finish", "state", state, "reason", reason, "tasks", n)
				}
			}
			rows.Close()
		}
	}
	b.StmtWindow = time.Since(c0.at)
	b.BackgroundStmtsInWin = idleRate * b.StmtWindow.Seconds()
	var serr error
	b.Stmts, serr = statements(ctx, db, 22)
	return b, serr
}

func steady(ctx context.Context, log *slog.Logger, cfg config, db *benchkit.StatsDB, coord *benchkit.Coordinator, pr probe, rp *rttProbe,
	tr *tracker, client podiumv1connect.TaskServiceClient, idleRate float64) (steadyResult, error) {
	s := steadyResult{Rate: cfg.rate, Duration: cfg.steadyTime}
	if err := db.ResetStatements(ctx); err != nil {
		return s, err
	}
	finished0 := tr.nFinished.Load()
	rp.take()
	c0 := pr.snap()
	log.Info("latency: steady offered load", "tasks/s", cfg.rate, "for", cfg.steadyTime)
	subs, skipped := submitSteady(ctx, client, cfg.rate, cfg.steadyTime, 1000)
	s.CPU = pr.since(c0)
	s.RTT = summarize(rp.take())
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	s.Submitted, s.Skipped = len(subs), skipped
	ok := countOK(subs)
	if err := waitFor(ctx, coord, cfg.drainTimeout, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		n := 0
		for _, sb := range subs {
			if _, ok := tr.assign[sb.id]; ok && sb.err == nil {
				n++
			}
		}
		return n >= ok
	}, nil); err != nil && !isTimeout(err) {
		return s, err
	}
	var lat, ret, rpc, acc []time.Duration
	tr.mu.Lock()
	for _, sb := range subs {
		if sb.err != nil {
			s.Errors++
			s.ErrSample = sb.err.Error()
			continue
		}
		rpc = append(rpc, sb.returned.Sub(sb.called))
		at, ok := tr.assign[sb.id]
		if !ok {
			continue
		}
		s.Assigned++
		lat = append(lat, at.Sub(sb.called))
		ret = append(ret, at.Sub(sb.returned))
		if a, ok := tr.accept[sb.id]; ok {
			acc = append(acc, a.Sub(at))
		}
	}
	tr.mu.Unlock()
	for _, d := range [][]time.Duration{lat, ret, rpc, acc} {
		slices.Sort(d)
	}
	s.P50, s.P90, s.P99, s.Max = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), percentile(lat, 100)
	s.RetP50, s.RetP99 = percentile(ret, 50), percentile(ret, 99)
	s.RPCP50, s.RPCP99 = percentile(rpc, 50), percentile(rpc, 99)
	s.AccP50, s.AccP99 = percentile(acc, 50), percentile(acc, 99)
	log.Info("latency: done", "assigned", s.Assigned, "p50", s.P50, "p99", s.P99)

	if err := waitFor(ctx, coord, cfg.drainTimeout, func() bool {
		return tr.nFinished.Load()-finished0 >= int64(s.Assigned)
	}, nil); err != nil && !isTimeout(err) {
		return s, err
	}
	s.StmtWindow = time.Since(c0.at)
	s.BackgroundStmtsInWin = idleRate * s.StmtWindow.Seconds()
	var err error
	s.Stmts, err = statements(ctx, db, 22)
	return s, err
}

func countOK(subs []submission) int {
	n := 0
	for _, s := range subs {
		if s.err == nil {
			n++
		}
	}
	return n
}

type timeoutError struct{ after time.Duration }

func (e timeoutError) Error() string { return "gave up waiting after " + e.after.String() }

func isTimeout(err error) bool { _, ok := err.(timeoutError); return ok }

// waitFor polls cond every 10 ms until it holds, ctx ends, the coordinator
// exits or timeout passes; progress, if set, runs every 5 s.
func waitFor(ctx context.Context, coord *benchkit.Coordinator, timeout time.Duration, cond func() bool, progress func()) error {
	deadline := time.Now().Add(timeout)
	lastProgress := time.Now()
	for !cond() {
		if time.Now().After(deadline) {
			return timeoutError{timeout}
		}
		if progress != nil && time.Since(lastProgress) >= 5*time.Second {
			progress()
			lastProgress = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-coord.Exited:
			return fmt.Errorf("the coordinator exited: %v; see %s", coord.WaitErr, coord.LogPath)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
