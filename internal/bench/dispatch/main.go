// Command dispatch measures how fast one coordinator replica turns submitted
// tasks into assignments on nodes, and how long a task waits for its node.
//
//	go run ./internal/bench/dispatch -nodes 1000
//
// It starts a throwaway Postgres, runs the real podium-coordinator binary as a
// subprocess (so its CPU is its own, read from /proc) and connects N simulated
// nodes, each a real Connect stream speaking the node protocol: Hello,
// heartbeats, and for every Assign a PROVISIONING event at once (accepting
// it), then RUNNING and SUCCEEDED (exit 0) shortly after so the slot comes
// free, re-sending unacknowledged events after a reconnect as the agent does.
// Tasks go in through the real TaskService.Submit, with the bearer token, over
// HTTP/2 cleartext.
//
// Two measurements:
//   - throughput: -tasks tasks submitted as fast as -submitters concurrent
//     callers go; tasks/s from the first Submit call to the last Assign
//     received by a node, beside the submit rate and the assign rate alone;
//   - latency: a steady, open-loop offered load of -rate tasks/s for
//     -steady-time; Submit-called → Assign-received percentiles.
//
// Beside them, in the same run on the same Postgres server (its own database,
// same schema), pgbench runs the least SQL a dispatch can be — insert a task,
// claim one queued task FOR UPDATE SKIP LOCKED, mark it scheduled — and the
// report prints the ratio. It also reports the coordinator's CPU and how many
// SQL statements it ran per task (pg_stat_statements), with the ones that
// dominate by count and by time.
//
// It is a program, not a test: a timing bound belongs in a benchmark that a
// person reads, not in an assertion that flakes on a busy machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
)

type config struct {
	benchkit.FleetFlags
	nodes          int
	tasks          int
	submitters     int
	rate           float64
	steadyTime     time.Duration
	settle         time.Duration
	maxTasks       int32
	startDelay     time.Duration
	runTime        time.Duration
	drainTimeout   time.Duration
	pgbenchThreads int
	cpuProfile     string
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	var maxTasks int
	flag.IntVar(&cfg.nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&cfg.tasks, "tasks", 10000, "tasks submitted in each throughput phase")
	flag.IntVar(&cfg.submitters, "submitters", 32, "concurrent Submit callers in the throughput phase")
	flag.Float64Var(&cfg.rate, "rate", 200, "offered load in the latency phase, tasks/s")
	flag.DurationVar(&cfg.steadyTime, "steady-time", 30*time.Second, "how long the latency phase offers its load")
	flag.DurationVar(&cfg.settle, "idle", 5*time.Second, "idle window after the nodes connect: what the replica runs with nothing to dispatch")
	flag.IntVar(&maxTasks, "max-tasks", 64, "slots per node (Capacity.max_tasks in Hello)")
	flag.DurationVar(&cfg.startDelay, "start-delay", 50*time.Millisecond, "a node reports RUNNING this long after PROVISIONING")
	flag.DurationVar(&cfg.runTime, "run-time", 100*time.Millisecond, "and SUCCEEDED this long after RUNNING")
	flag.DurationVar(&cfg.drainTimeout, "drain-timeout", 2*time.Minute, "give up waiting for a phase's tasks to be assigned (or to finish) after this long and report what was")
	flag.IntVar(&cfg.pgbenchThreads, "pgbench-threads", 2, "pgbench threads")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark itself (the simulated fleet and the submitters) to this file; the coordinator's own is at --debug-listen")
	cfg.Register(flag.CommandLine, benchkit.FleetFlags{
		PerConn: 200, Inflight: 500, HelloTimeout: 15 * time.Second, ConnectTimeout: 3 * time.Minute,
		PgbenchClients: 8, PgbenchTime: 15 * time.Second,
	})
	flag.Parse()
	cfg.maxTasks = int32(maxTasks)
	if cfg.nodes <= 0 || cfg.tasks <= 0 || cfg.submitters <= 0 || cfg.rate <= 0 || maxTasks <= 0 {
		fmt.Fprintln(os.Stderr, "dispatch: -nodes, -tasks, -submitters, -rate and -max-tasks must be positive")
		return 2
	}
	if err := cfg.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// ^C cancels ctx; every step waits on it and the deferred cleanups stop
	// the fleet, the coordinator and Postgres, in that order.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dispatch:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "dispatch:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}

	setup, err := benchkit.Start(ctx, log, "dispatch", cfg.FleetFlags)
	if err != nil {
		return benchkit.Exit(ctx, "dispatch", err)
	}
	defer setup.Close()

	r, err := measure(ctx, log, cfg, setup)
	if err != nil {
		return benchkit.Exit(ctx, "dispatch", err)
	}
	report(os.Stdout, cfg, r)
	fmt.Println(setup.Machine())
	return 0
}
