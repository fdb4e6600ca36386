package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

// result is everything measured for one node count.
type result struct {
	Nodes     int
	Connected int // nodes holding a stream when the window ended
	Conns     int // HTTP/2 connections the nodes are spread over
	PerConn   int
	Shared    string // why the nodes shared connections, when they had to

	ConnectTime  time.Duration // first Hello to the last node's HelloAck
	AllConnected bool
	HelloP50     time.Duration
	HelloP99     time.Duration
	HelloRetries int64
	Dropped      int64 // streams that ended without the bench asking
	ErrSamples   map[string]int
	// During the ramp: CPU (% of one core) and what each Hello cost Postgres.
	RampCoordCPU  float64
	RampPGCPU     float64
	RampBenchCPU  float64
	StmtsPerHello float64
	RampTop       []benchkit.Statement

	Window     time.Duration
	CoordCPU   float64 // % of one core
	BaseRSSMiB float64 // the coordinator with no nodes, just after it became ready
	RSSMiB     float64
	PeakMiB    float64 // VmHWM: the high-water mark, ramp included
	CoordFDs   int
	PGConns    int     // the coordinator's connections to Postgres
	PGCPU      float64 // all Postgres processes, % of one core
	BenchCPU   float64 // this process (the simulated nodes), % of one core
	BeatsSent  int64   // heartbeats the simulated nodes sent in the window
	HBStmts    float64 // heartbeat flush statements per second
	HBPerFlush float64 // heartbeat statements per flush transaction
	Flushes    int64
	HBRows     float64 // rows they updated per second
	NeedRows   float64 // N / interval: what the fleet must get written
	AllStmts   float64 // every statement the coordinator ran, per second
	Top        []benchkit.Statement
	Stale      int
	NotOnline  int
	Warnings   int
	WarnSample []string

	PgbenchRows float64 // naive one-UPDATE-per-heartbeat ceiling

	Profile benchkit.MemProfile // at the end of the window
}

// measure runs one node count from scratch: a fresh database, the naive
// reference, a fresh coordinator, the fleet, the window.
func measure(ctx context.Context, log *slog.Logger, cfg config, setup *benchkit.Setup, n int) (result, error) {
	r := result{Nodes: n, NeedRows: float64(n) / cfg.interval.Seconds()}
	log = log.With("nodes", n)

	db, err := benchkit.OpenStatsDB(ctx, setup.Cluster, dbName)
	if err != nil {
		return r, err
	}
	defer db.Close()
	creds, err := db.InsertNodes(ctx, n, 0)
	if err != nil {
		return r, err
	}

	// The reference runs first, alone, so neither measurement disturbs the other.
	if cfg.PgbenchTime > 0 {
		log.Info("pgbench reference: one UPDATE per heartbeat", "clients", cfg.PgbenchClients, "for", cfg.PgbenchTime)
		if r.PgbenchRows, _, err = naiveHeartbeat(n, cfg.PgbenchClients, cfg.PgbenchTime).Run(ctx, setup.Cluster, setup.Work); err != nil {
			return r, err
		}
	}

	debugPort, err := benchkit.FreePort()
	if err != nil {
		return r, err
	}
	debugAddr := "127.0.0.1:" + strconv.Itoa(debugPort)
	coord, err := setup.StartCoordinator(ctx, db.URL, filepath.Join(setup.Work, fmt.Sprintf("coordinator-%d.log", n)), nil,
		"--heartbeat-interval", cfg.interval.String(), "--debug-listen", debugAddr)
	if err != nil {
		return r, err
	}
	defer coord.Shutdown(log)
	log.Info("coordinator up", "pid", coord.PID, "url", coord.URL, "log", coord.LogPath)
	if mem, err := benchkit.ProcMem(coord.PID); err == nil {
		r.BaseRSSMiB = float64(mem.RSSKiB) / 1024
	}
	pgPID, err := benchkit.PostmasterPID(filepath.Join(setup.Cluster.SocketDir, "data"))
	if err != nil {
		return r, err
	}

	// The ramp is measured too: connecting is when a replica that restarts (or
	// takes over another's nodes) is busiest.
	if err := db.ResetStatements(ctx); err != nil {
		return r, err
	}
	rc0, err := benchkit.ProcCPU(coord.PID)
	if err != nil {
		return r, err
	}
	rpg0, rb0 := benchkit.TreeCPU(pgPID), benchkit.SelfCPU()

	fctx, stopFleet := context.WithCancel(ctx)
	fc := setup.FleetConfig(coord, creds, cfg.interval)
	if fc.Shared != "" {
		log.Warn("nodes share connections", "why", fc.Shared)
	}
	f := benchkit.NewFleet(fc, idleNode{})
	r.Conns, r.PerConn, r.Shared = f.Conns(), fc.PerConn, fc.Shared
	done := f.Start(fctx)
	defer func() { stopFleet(); <-done }()

	log.Info("connecting nodes", "connections", f.Conns(), "hellos in flight", cfg.Inflight)
	progress := time.NewTicker(5 * time.Second)
	timeout := time.NewTimer(cfg.ConnectTimeout)
	defer progress.Stop()
	defer timeout.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-coord.Exited:
			return r, fmt.Errorf("the coordinator exited while nodes were connecting: %v; see %s", coord.WaitErr, coord.LogPath)
		case <-f.AllUp():
			r.AllConnected = true
			break wait
		case <-timeout.C:
			log.Warn("not every node connected in time; measuring what is connected", "connected", f.Connected.Load())
			break wait
		case <-progress.C:
			log.Info("connecting", "connected", f.Connected.Load(), "retries", f.Retries.Load())
		}
	}
	r.ConnectTime = f.ConnectTime()
	r.HelloP50, r.HelloP99 = f.HelloPercentiles()
	if rc1, err := benchkit.ProcCPU(coord.PID); err == nil {
		ramp := r.ConnectTime.Seconds()
		r.RampCoordCPU = 100 * (rc1 - rc0).Seconds() / ramp
		r.RampPGCPU = 100 * benchkit.TreeCPU(pgPID).Since(rpg0).Seconds() / ramp
		r.RampBenchCPU = 100 * (benchkit.SelfCPU() - rb0).Seconds() / ramp
	}
	if st, err := statements(ctx, db); err == nil && f.Connected.Load() > 0 {
		r.StmtsPerHello = float64(st.allCalls) / float64(f.Connected.Load())
		r.RampTop = st.top
	}
	log.Info("connected", "connected", f.Connected.Load(), "took", r.ConnectTime.Round(time.Millisecond),
		"hello p50", r.HelloP50, "hello p99", r.HelloP99)

	log.Info("settling before the window", "for", cfg.settle)
	if err := benchkit.Sleep(ctx, cfg.settle); err != nil {
		return r, err
	}

	// The window: sample everything, wait, sample again.
	if err := db.ResetStatements(ctx); err != nil {
		return r, err
	}
	c0, err := benchkit.ProcCPU(coord.PID)
	if err != nil {
		return r, err
	}
	pg0 := benchkit.TreeCPU(pgPID)
	b0 := benchkit.SelfCPU()
	beats0 := f.Beats.Load()
	t0 := time.Now()
	log.Info("measuring", "for", cfg.duration)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-coord.Exited:
		return r, fmt.Errorf("the coordinator exited during the window: %v; see %s", coord.WaitErr, coord.LogPath)
	case <-time.After(cfg.duration):
	}
	r.Window = time.Since(t0)
	secs := r.Window.Seconds()
	c1, err := benchkit.ProcCPU(coord.PID)
	if err != nil {
		return r, err
	}
	r.CoordCPU = 100 * (c1 - c0).Seconds() / secs
	r.PGCPU = 100 * benchkit.TreeCPU(pgPID).Since(pg0).Seconds() / secs
	r.BenchCPU = 100 * (benchkit.SelfCPU() - b0).Seconds() / secs
	r.BeatsSent = f.Beats.Load() - beats0
	mem, err := benchkit.ProcMem(coord.PID)
	if err != nil {
		return r, err
	}
	r.RSSMiB, r.PeakMiB = float64(mem.RSSKiB)/1024, float64(mem.HWMKiB)/1024
	r.CoordFDs = benchkit.ProcFDs(coord.PID)
	if r.PGConns, err = db.Backends(ctx); err != nil {
		return r, err
	}
	st, err := statements(ctx, db)
	if err != nil {
		return r, err
	}
	r.HBStmts, r.HBRows = float64(st.hbCalls)/secs, float64(st.hbRows)/secs
	r.Flushes = st.flushes
	if st.flushes > 0 {
		r.HBPerFlush = float64(st.hbCalls) / float64(st.flushes)
	}
	r.AllStmts = float64(st.allCalls) / secs
	r.Top = st.top
	if r.Stale, r.NotOnline, err = staleNodes(ctx, db, cfg.staleAfter); err != nil {
		return r, err
	}
	r.Connected = int(f.Connected.Load())
	r.HelloRetries, r.Dropped = f.Retries.Load(), f.Dropped.Load()
	r.ErrSamples = f.ErrSamples()
	r.Warnings, r.WarnSample = coord.Warnings()
	// Last, as it collects garbage and stops the world: where the memory goes.
	if r.Profile, err = benchkit.ReadMemProfile(ctx, debugAddr, setup.Work, fmt.Sprintf("coordinator-%d", n)); err != nil {
		log.Warn("no memory profile", "err", err)
	}
	return r, nil
}
