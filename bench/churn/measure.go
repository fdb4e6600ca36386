package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// phaseResult is one phase: its tasks end to end and its samples.
type phaseResult struct {
	Name  string
	Args  []string
	Tasks int

	Submitted, SubmitErrors int64
	ErrSample               string
	Finished                int64
	OutBytes                int64
	// Elapsed is first Submit → last terminal event acknowledged; Rate is
	// Finished over it, and MarkRate the rate over the first Mark tasks
	// (phase A's count, so B's start compares with A like for like).
	Elapsed                   time.Duration
	Rate                      float64
	Mark                      int64
	MarkElapsed               time.Duration
	Stalled                   bool
	Samples                   []sample
	DispatchEndIdx            int // samples[:DispatchEndIdx] were taken while tasks ran
	ArchiveDrained            bool
	SampleErrs                int
	CPUCoord, CPUPG, CPUBench float64 // % of one core over the dispatch window
	PeakRSS                   int64
	Conns                     int
	ConnectTime               time.Duration
	Retries, Dropped          int64
	Rejected, Repeats         int64
	Cancels                   int64
	NodeErrs                  map[string]int
	Warnings                  int
	WarnSample                []string
	Store                     bool
}

type result struct {
	PGSettings [][2]string
	PGVersion  string
	Ratio      float64 // zstd on a task's output
	A, B       *phaseResult
}

func measure(ctx context.Context, log *slog.Logger, cfg config, setup *benchkit.Setup) (result, error) {
	var r result
	c := newCorpus()
	r.Ratio = c.ratio(cfg.output, 200)
	log.Info("output", "bytes per task", cfg.output, "zstd ratio", fmt.Sprintf("%.1f", r.Ratio))
	if err := pgSettings(ctx, setup, &r); err != nil {
		return r, err
	}
	var store *s3test.Server
	if cfg.objectStore == "s3" {
		var err error
		if store, err = s3test.Launch(filepath.Join(setup.Work, "s3")); err != nil {
			return r, err
		}
		defer store.Stop()
	}
	argsA, argsB := cfg.phaseArgs()
	if cfg.phaseATasks > 0 {
		p, err := runPhase(ctx, log, cfg, setup, store, c, "a", cfg.phaseATasks, argsA, 0)
		r.A = &p
		if err != nil {
			return r, fmt.Errorf("phase A: %w", err)
		}
	}
	p, err := runPhase(ctx, log, cfg, setup, store, c, "b", cfg.tasks, argsB, int64(cfg.phaseATasks))
	r.B = &p
	if err != nil {
		return r, fmt.Errorf("phase B: %w", err)
	}
	return r, nil
}

// pgSettings records what the server runs with, for the report.
func pgSettings(ctx context.Context, setup *benchkit.Setup, r *result) error {
	conn, err := pgx.Connect(ctx, setup.Cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, "show server_version").Scan(&r.PGVersion); err != nil {
		return err
	}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
		"max_wal_size", "checkpoint_timeout", "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor"} {
		var v string
		if err := conn.QueryRow(ctx, "select current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		r.PGSettings = append(r.PGSettings, [2]string{name, v})
	}
	return nil
}

// runPhase runs n tasks through a fresh database and coordinator started
// with args, sampling all along, and (when mark > 0) notes when mark tasks
// had finished. The database is dropped at the end: each phase's figures are
// its own, and the disk is not kept full.
func runPhase(ctx context.Context, log *slog.Logger, cfg config, setup *benchkit.Setup, store *s3test.Server,
	c *corpus, name string, n int, args []string, mark int64) (p phaseResult, err error) {
	p = phaseResult{Name: name, Args: args, Tasks: n, Mark: mark, Store: store != nil}
	log = log.With("phase", name)
	dbName := "churn_" + name
	dbURL, err := benchkit.CreateDB(ctx, setup.Cluster, dbName)
	if err != nil {
		return p, err
	}
	defer dropDB(setup, dbName, log)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return p, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	creds, err := benchkit.InsertNodes(ctx, conn, cfg.nodes, cfg.maxTasks)
	if err != nil {
		return p, err
	}

	var env, extra []string
	var storeDir string
	if store != nil {
		bucket := "podium-churn-" + name
		env = []string{"PODIUM_S3_SECRET_KEY=" + store.SecretKey}
		extra = []string{"--s3-endpoint", store.Endpoint, "--s3-tls=false", "--s3-bucket", bucket, "--s3-access-key", store.AccessKey}
		storeDir = filepath.Join(store.Dir, bucket)
	}
	extra = append(extra, args...)
	log.Info("starting the coordinator", "args", args)
	coord, err := benchkit.StartCoordinator(ctx, setup.Bin, dbURL, filepath.Join(setup.Work, "coordinator-"+name+".log"), env, extra...)
	if err != nil {
		return p, err
	}
	defer coord.Shutdown(log)
	pgPID, err := benchkit.PostmasterPID(filepath.Join(setup.Cluster.SocketDir, "data"))
	if err != nil {
		return p, err
	}

	// The submit window: a token per task submitted and not yet finished.
	window := make(chan struct{}, cfg.window)
	release := func() {
		select {
		case <-window:
		default:
		}
	}
	f := newFleet(coord.URL, creds, cfg, c, release)
	p.Conns = f.Conns()
	fctx, stopFleet := context.WithCancel(ctx)
	fleetDone := f.Start(fctx)
	defer func() { stopFleet(); <-fleetDone }()
	log.Info("connecting nodes", "nodes", cfg.nodes, "connections", f.Conns())
	if err := wait(ctx, coord, cfg.connectTimeout, func() bool {
		select {
		case <-f.AllUp():
			return true
		default:
			return false
		}
	}); err != nil {
		return p, fmt.Errorf("nodes connecting (%d of %d up): %w", f.Connected.Load(), cfg.nodes, err)
	}
	p.ConnectTime = f.ConnectTime()
	log.Info("nodes connected", "took", p.ConnectTime.Round(time.Millisecond))

	// The sampler starts with the first Submit.
	began := time.Now()
	var mu sync.Mutex
	smp := &sampler{conn: conn, began: began, storeDir: storeDir, coordPID: coord.PID, pgPID: pgPID, fleet: f, every: cfg.sampleEvery}
	sctx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		smp.run(sctx, func(x sample) {
			mu.Lock()
			p.Samples = append(p.Samples, x)
			mu.Unlock()
			log.Info("sample", "t", x.At.Round(time.Second), "finished", x.Finished, "db", mib(x.DBBytes), "tasks", x.Tasks,
				"events", x.Events, "archived", x.Archived, "backlog", x.Backlog, "coordCPU%", int(x.CoordCPU), "pgCPU%", int(x.PGCPU))
		}, func(err error) {
			mu.Lock()
			p.SampleErrs++
			mu.Unlock()
			log.Warn("sample failed", "err", err)
		})
	}()
	stopSampling := func() { stopSampler(); <-samplerDone }
	defer stopSampling()

	cpuCoord0, _ := benchkit.ProcCPU(coord.PID)
	cpuPG0 := benchkit.TreeCPU(pgPID)
	self0 := benchkit.SelfCPU()

	client, ct := taskClient(coord.URL)
	defer ct.CloseIdleConnections()
	var markAt atomic.Int64
	subDone := make(chan struct{})
	subCtx, stopSubmit := context.WithCancel(ctx)
	defer stopSubmit()
	go func() {
		defer close(subDone)
		submitAll(subCtx, client, cfg.submitters, n, cfg.rate, window, &p.Submitted, &p.SubmitErrors, &p.ErrSample, release)
	}()
	log.Info("submitting", "tasks", n, "submitters", cfg.submitters, "window", cfg.window)

	// Wait for every submitted task to finish, giving up when none has for
	// -stall-timeout.
	last, lastMove := int64(-1), time.Now()
waiting:
	for {
		done := f.finished.Load()
		if mark > 0 && done >= mark && markAt.Load() == 0 {
			markAt.Store(f.lastDone.Load())
		}
		select {
		case <-subDone:
			if done >= atomic.LoadInt64(&p.Submitted)-atomic.LoadInt64(&p.SubmitErrors) {
				break waiting
			}
		default:
		}
		if done != last {
			last, lastMove = done, time.Now()
		} else if time.Since(lastMove) > cfg.stall {
			log.Warn("no task finished for the stall timeout; reporting what was", "finished", done, "timeout", cfg.stall)
			p.Stalled = true
			break waiting
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-coord.Exited:
			return p, fmt.Errorf("the coordinator exited: %v; see %s", coord.WaitErr, coord.LogPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopSubmit()
	<-subDone
	p.Finished = f.finished.Load()
	p.OutBytes = f.outBytes.Load()
	end := time.Unix(0, f.lastDone.Load())
	if p.Finished == 0 {
		end = time.Now()
	}
	p.Elapsed = end.Sub(began)
	p.Rate = float64(p.Finished) / p.Elapsed.Seconds()
	if at := markAt.Load(); at != 0 {
		p.MarkElapsed = time.Unix(0, at).Sub(began)
	}
	secs := time.Since(began).Seconds()
	cpuCoord1, _ := benchkit.ProcCPU(coord.PID)
	p.CPUCoord = 100 * (cpuCoord1 - cpuCoord0).Seconds() / secs
	p.CPUPG = 100 * benchkit.TreeCPU(pgPID).Since(cpuPG0).Seconds() / secs
	p.CPUBench = 100 * (benchkit.SelfCPU() - self0).Seconds() / secs
	log.Info("tasks done", "finished", p.Finished, "took", p.Elapsed.Round(time.Millisecond), "tasks/s", fmt.Sprintf("%.0f", p.Rate))

	// One more sample at the end of dispatch, then (phase B) wait for the
	// archive to catch up, still sampling.
	if x, err := smp.take(ctx); err == nil {
		mu.Lock()
		p.Samples = append(p.Samples, x)
		mu.Unlock()
	}
	mu.Lock()
	p.DispatchEndIdx = len(p.Samples)
	mu.Unlock()
	// Only where there is an archive job to wait for.
	if name == "b" && !p.Stalled && !cfg.noRetention && cfg.archiveDrain > 0 {
		log.Info("waiting for the archive backlog to drain", "at most", cfg.archiveDrain)
		deadline := time.Now().Add(cfg.archiveDrain)
		for time.Now().Before(deadline) {
			mu.Lock()
			lastS := p.Samples[len(p.Samples)-1]
			mu.Unlock()
			if lastS.Backlog == 0 && lastS.At > p.Elapsed {
				p.ArchiveDrained = true
				break
			}
			if err := benchkit.Sleep(ctx, cfg.sampleEvery/4); err != nil {
				return p, err
			}
		}
	}
	stopSampling()

	if m, err := benchkit.ProcMem(coord.PID); err == nil {
		p.PeakRSS = m.HWMKiB << 10
	}
	p.Retries, p.Dropped = f.Retries.Load(), f.Dropped.Load()
	p.Rejected, p.Repeats, p.Cancels = f.Rejected.Load(), f.Repeats.Load(), f.Cancels.Load()
	p.NodeErrs = f.ErrSamples()
	p.Warnings, p.WarnSample = coord.Warnings()
	return p, nil
}

// dropDB removes a phase's database once its coordinator has stopped.
func dropDB(setup *benchkit.Setup, name string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, setup.Cluster.URL("postgres"))
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "drop database if exists "+name+" with (force)"); err != nil {
		log.Warn("drop the phase's database", "err", err)
	}
}

// submitAll submits n tasks from conc callers, each taking a window token
// first; a failed Submit gives its token back. With rate > 0 the i-th task
// is not submitted before i/rate seconds: an offered load below what the
// stack can take, to see where the database levels off when the archive
// keeps up.
func submitAll(ctx context.Context, c podiumv1connect.TaskServiceClient, conc, n int, rate float64, window chan struct{},
	submitted, errs *int64, errSample *string, release func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if int(i) > n {
					return
				}
				if rate > 0 && benchkit.Sleep(ctx, time.Until(start.Add(time.Duration(float64(i-1)/rate*float64(time.Second))))) != nil {
					return
				}
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					return
				}
				_, err := c.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
				atomic.AddInt64(submitted, 1)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					atomic.AddInt64(errs, 1)
					once.Do(func() { *errSample = err.Error() })
					release()
					// A coordinator that refuses is not hammered.
					if benchkit.Sleep(ctx, 100*time.Millisecond) != nil {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// taskClient is a TaskService client over HTTP/2 cleartext that sends the
// bearer token, as the podium CLI does.
func taskClient(url string) (podiumv1connect.TaskServiceClient, *http.Transport) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t := &http.Transport{Protocols: &p}
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+benchkit.APIToken)
			return next(ctx, req)
		}
	})
	return podiumv1connect.NewTaskServiceClient(&http.Client{Transport: t}, url, connect.WithInterceptors(auth)), t
}

// wait polls cond every 20 ms until it holds, ctx ends, the coordinator
// exits or timeout passes.
func wait(ctx context.Context, coord *benchkit.Coordinator, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-coord.Exited:
			return fmt.Errorf("the coordinator exited: %v; see %s", coord.WaitErr, coord.LogPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
