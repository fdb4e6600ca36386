// Command dispatch measures how fast one coordinator replica turns submitted
// tasks into assignments on nodes, and how long a task waits for its node.
//
//	go run ./bench/dispatch -nodes 1000
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
// report prints the ratio. The peer is River (riverpeer, a program in a Go
// module of its own): the same burst of one-at-a-time inserts and the same
// offered load, from Insert called to worker started, on its own database of
// the same server. It also reports CPU per task (the whole machine from
// /proc/stat, and the coordinator, Postgres and the bench on their own) and
// how many SQL statements ran per task (pg_stat_statements), with the ones
// that dominate by count and by time.
//
// All of it runs twice by default, each on a Postgres of its own (-modes):
// durable, production's settings (fsync, synchronous_commit, full_page_writes
// on), the headline; and fast, the test settings (all three off), labelled.
// And for each, once with fair share on and once off (-fair-share on,off: the
// coordinator's --fair-share), again each on a Postgres of its own, so the
// cost of fair share is read from one run. Fair share does its counting only
// when sharers contend, so beside the bursts of one submitter there is a
// contended one: the same -tasks submitted by -users people (users the
// bench adds through the admin API, each submitting with their own token),
// dispatched alone. The summary prints every measurement as a column.
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
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

type config struct {
	benchkit.FleetFlags
	nodes            int
	tasks            int
	submitters       int
	rate             float64
	steadyTime       time.Duration
	settle           time.Duration
	maxTasks         int32
	startDelay       time.Duration
	runTime          time.Duration
	drainTimeout     time.Duration
	pgbenchThreads   int
	cpuProfile       string
	modes            []mode
	river            bool
	fairShare        []bool
	users            int
	riverCooldown    time.Duration
	coordProfile     string
	coordProfileTime time.Duration
}

// mode is a Postgres configuration the whole measurement runs under.
type mode struct {
	name     string
	label    string
	settings []string // after pgtest's own (which are the fast ones)
}

var modes = map[string]mode{
	"durable": {"durable", "durable Postgres (fsync, synchronous_commit, full_page_writes on: production's settings)",
		[]string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}},
	"fast": {"fast", "FAST Postgres (fsync, synchronous_commit, full_page_writes off: the test settings, not production's)", nil},
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
	fairList := flag.String("fair-share", "on,off", "the coordinator's --fair-share to measure under, in order, each on a fresh server: on, off or both")
	flag.IntVar(&cfg.users, "users", 10, "people submitting the contended burst (each added through the admin API with a token of their own); 0 skips it")
	modeList := flag.String("modes", "durable,fast", "the Postgres settings to measure under, in order, each on a fresh server: durable (production's: fsync, synchronous_commit, full_page_writes on) and fast (the test settings: all three off)")
	flag.BoolVar(&cfg.river, "river", true, "run the peer reference, River (riverpeer, built from its own module)")
	flag.DurationVar(&cfg.riverCooldown, "river-fetch-cooldown", time.Millisecond, "River's FetchCooldown (its default is 100 ms, which puts its p99 near 100 ms)")
	flag.StringVar(&cfg.coordProfile, "coordinator-profile", "", "take a CPU profile of the coordinator (through its --debug-listen) from the start of the dispatch-alone burst and write it to this file + .durable or .fast")
	flag.DurationVar(&cfg.coordProfileTime, "coordinator-profile-time", 5*time.Second, "how long -coordinator-profile profiles")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark itself (the simulated fleet and the submitters) to this file; the coordinator's own is at --debug-listen")
	cfg.Register(flag.CommandLine, benchkit.FleetFlags{
		PerConn: 1, Inflight: 500, HelloTimeout: 15 * time.Second, ConnectTimeout: 3 * time.Minute,
		PgbenchClients: 8, PgbenchTime: 15 * time.Second,
	})
	flag.Parse()
	cfg.maxTasks = int32(maxTasks)
	for _, name := range strings.Split(*modeList, ",") {
		m, ok := modes[strings.TrimSpace(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "dispatch: -modes: %q is not durable or fast\n", name)
			return 2
		}
		cfg.modes = append(cfg.modes, m)
	}
	for _, v := range strings.Split(*fairList, ",") {
		switch strings.TrimSpace(v) {
		case "on":
			cfg.fairShare = append(cfg.fairShare, true)
		case "off":
			cfg.fairShare = append(cfg.fairShare, false)
		default:
			fmt.Fprintf(os.Stderr, "dispatch: -fair-share: %q is not on or off\n", v)
			return 2
		}
	}
	if cfg.users < 0 || cfg.users > 1000 {
		fmt.Fprintln(os.Stderr, "dispatch: -users: want 0 (no contended burst) to 1000")
		return 2
	}
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

	load := benchkit.LoadAvg()
	var riverBin string
	if cfg.river {
		dir, err := os.MkdirTemp("", "podium-bench-riverpeer-")
		if err != nil {
			return benchkit.Exit(ctx, "dispatch", err)
		}
		defer os.RemoveAll(dir)
		log.Info("building riverpeer (River, from its own module)")
		if riverBin, err = buildRiverPeer(ctx, dir); err != nil {
			return benchkit.Exit(ctx, "dispatch", err)
		}
	}
	var results []result
	for _, m := range cfg.modes {
		for _, fair := range cfg.fairShare {
			log.Info("measuring", "postgres", m.label, "fair share", onOff(fair))
			r, err := measureMode(ctx, log, cfg, m, fair, riverBin)
			if err != nil {
				return benchkit.Exit(ctx, "dispatch", fmt.Errorf("%s, fair share %s: %w", m.name, onOff(fair), err))
			}
			report(os.Stdout, cfg, r)
			results = append(results, r)
		}
	}
	summary(os.Stdout, cfg, results)
	fmt.Printf("machine: %d CPUs, load average %s at the start, %s at the end (other work on the machine skews every figure)\n",
		runtime.NumCPU(), load, benchkit.LoadAvg())
	return 0
}

// measureMode measures on a Postgres of its own, started with m's settings
// (and pg_stat_statements), and stops it afterwards.
func measureMode(ctx context.Context, log *slog.Logger, cfg config, m mode, fair bool, riverBin string) (result, error) {
	setup, err := benchkit.StartWith(ctx, log, "dispatch-"+m.name, cfg.FleetFlags,
		append([]string{"shared_preload_libraries=pg_stat_statements"}, m.settings...)...)
	if err != nil {
		return result{}, err
	}
	defer setup.Close()
	return measure(ctx, log, cfg, m, fair, setup, riverBin)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
