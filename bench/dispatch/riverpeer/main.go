// Command riverpeer is the peer reference of the dispatch benchmark: River
// (github.com/riverqueue/river), the Postgres-backed job queue a Go user
// would pick for the same job, measured on the same Postgres in the same run.
// It lives in a Go module of its own so that Podium's go.mod does not carry
// River; the dispatch benchmark builds it and drives it. Of Podium it imports
// only bench/dispatch/load (through a replace directive), so both
// sides are offered the same load by the same code.
//
// It measures what Podium's dispatch benchmark measures, from River's side:
// each job is inserted one at a time (Client.Insert, its own transaction, as
// a Submit is), and a job counts as dispatched when its worker starts.
//
//   - burst: -jobs jobs inserted by -inserters concurrent callers, each
//     waiting for its Insert to return before the next; jobs/s from the
//     first Insert called to the last worker started;
//   - steady: -rate jobs/s offered open loop for -steady-time; Insert
//     called → worker started percentiles.
//
// The benchmark measures CPU and statements around each phase, so the
// program says when a phase can begin and waits to be told: on stdout it
// prints "ready PHASE", then reads a line from stdin; it prints "mark PHASE"
// when the last job's worker started (the end of the rate's window) and
// "result PHASE {json}" once every job of the phase has completed (the end
// of the statements' window: River completes jobs in batches after they
// run). Everything else goes to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/podiumhq/podium/bench/dispatch/load"
)

// benchArgs is a job: its number in the run, so the worker can say when it
// started.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

// worker records when each job's worker started and returns at once: the
// dispatch benchmark's nodes accept a task and report it, nothing more.
type worker struct {
	river.WorkerDefaults[benchArgs]
	started  []atomic.Int64 // unix nanoseconds, by job number
	nStarted atomic.Int64
	all      atomic.Int64 // how many jobs the phase expects
	allDone  chan struct{}
}

func (w *worker) Work(_ context.Context, job *river.Job[benchArgs]) error {
	w.started[job.Args.N].Store(time.Now().UnixNano())
	if w.nStarted.Add(1) == w.all.Load() {
		close(w.allDone)
	}
	return nil
}

// phaseResult is what a phase prints with its result line.
type phaseResult struct {
	Jobs     int     `json:"jobs"`     // inserted without error
	Errors   int     `json:"errors"`   // Inserts that failed
	Started  int     `json:"started"`  // workers that started
	Rate     float64 `json:"rate"`     // jobs/s, first Insert called → last worker started
	InsertPS float64 `json:"insertPS"` // jobs/s, first Insert called → last Insert returned
	P50      float64 `json:"p50"`      // ms, Insert called → worker started
	P90      float64 `json:"p90"`
	P99      float64 `json:"p99"`
	Max      float64 `json:"max"`
	Error    string  `json:"error,omitempty"` // the first Insert error
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "riverpeer:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("database", "", "Postgres URL of an empty database of its own")
	jobs := flag.Int("jobs", 10000, "jobs inserted in the burst")
	inserters := flag.Int("inserters", 32, "concurrent one-at-a-time inserters in the burst")
	rate := flag.Float64("rate", 200, "jobs/s offered in the steady phase")
	steadyTime := flag.Duration("steady-time", 30*time.Second, "how long the steady phase offers its load")
	cooldown := flag.Duration("fetch-cooldown", time.Millisecond, "River's FetchCooldown: the least time between two fetches (River's default is 100 ms)")
	workers := flag.Int("workers", 100, "River's MaxWorkers on the queue")
	flag.Parse()
	if *url == "" {
		return errors.New("-database is required")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River's tables: %w", err)
	}

	steadyJobs := int(*rate * steadyTime.Seconds())
	w := &worker{started: make([]atomic.Int64, *jobs+steadyJobs)}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	client, err := river.NewClient(driver, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers:       ws,
		FetchCooldown: *cooldown,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	completed, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: *jobs + steadyJobs})
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()

	stdin := bufio.NewScanner(os.Stdin)
	phase := func(name string, first, n int, insert func(func(i int) call) []call) error {
		w.nStarted.Store(0)
		w.all.Store(int64(n))
		w.allDone = make(chan struct{})
		fmt.Printf("ready %s\n", name)
		if !stdin.Scan() {
			return errors.New("stdin closed before the phase began")
		}
		calls := insert(func(i int) call { return insertOne(ctx, client, first+i) })
		res := summarize(w, first, calls)
		// Jobs whose Insert failed never start: wait for the others only.
		if res.Jobs < n {
			w.all.Store(int64(res.Jobs))
		}
		if int(w.nStarted.Load()) < res.Jobs {
			select {
			case <-w.allDone:
			case <-time.After(2 * time.Minute):
			}
		}
		fmt.Printf("mark %s\n", name)
		res = summarize(w, first, calls)
		for done := 0; done < res.Started; done++ {
			select {
			case <-completed:
			case <-time.After(time.Minute):
				return fmt.Errorf("%s: only %d of %d jobs completed within a minute", name, done, res.Started)
			}
		}
		b, _ := json.Marshal(res)
		fmt.Printf("result %s %s\n", name, b)
		return nil
	}
	if err := phase("burst", 0, *jobs, func(one func(int) call) []call { return load.Burst(ctx, *jobs, *inserters, one) }); err != nil {
		return err
	}
	// Every call is made: nothing is skipped for too many in flight.
	return phase("steady", *jobs, steadyJobs, func(one func(int) call) []call {
		out, _ := load.Steady(ctx, *rate, *steadyTime, steadyJobs, one)
		return out
	})
}

// call is one Insert: when it was called and returned.
type call struct {
	called, returned time.Time
	err              error
}

func insertOne(ctx context.Context, c *river.Client[pgx.Tx], n int) call {
	k := call{called: time.Now()}
	_, k.err = c.Insert(ctx, benchArgs{N: n}, nil)
	k.returned = time.Now()
	return k
}

// summarize reads a phase's Inserts against the workers' start times.
func summarize(w *worker, first int, calls []call) phaseResult {
	var r phaseResult
	var firstCall, lastReturn, lastStart time.Time
	var lat []time.Duration
	for i, c := range calls {
		if firstCall.IsZero() || c.called.Before(firstCall) {
			firstCall = c.called
		}
		if c.returned.After(lastReturn) {
			lastReturn = c.returned
		}
		if c.err != nil {
			if r.Errors == 0 {
				r.Error = c.err.Error()
			}
			r.Errors++
			continue
		}
		r.Jobs++
		ns := w.started[first+i].Load()
		if ns == 0 {
			continue
		}
		at := time.Unix(0, ns)
		r.Started++
		lat = append(lat, at.Sub(c.called))
		if at.After(lastStart) {
			lastStart = at
		}
	}
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(load.Percentile(lat, q)) / float64(time.Millisecond) }
	r.P50, r.P90, r.P99, r.Max = pct(50), pct(90), pct(99), pct(100)
	if r.Started > 0 {
		r.Rate = float64(r.Started) / lastStart.Sub(firstCall).Seconds()
	}
	if r.Jobs > 0 {
		r.InsertPS = float64(r.Jobs) / lastReturn.Sub(firstCall).Seconds()
	}
	return r
}
