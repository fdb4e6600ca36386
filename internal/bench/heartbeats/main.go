// Command heartbeats measures how many nodes one coordinator replica can hold
// at the protocol's 10 s heartbeat interval, and what that costs.
//
//	go run ./internal/bench/heartbeats -nodes 1000,10000 -duration 60s
//
// It starts a throwaway Postgres, runs the real podium-coordinator binary as a
// subprocess (so its CPU and memory are its own, read from /proc, not mixed
// with the simulated nodes') and opens one real Connect stream per simulated
// node, each saying Hello and then heartbeating like an agent. Over a window
// it reports the replica's CPU, its resident memory (now and peak), how many
// heartbeat statements and rows reached Postgres (pg_stat_statements), and how
// many nodes' stored clocks went stale.
//
// Beside those figures it prints a reference measured in the same run on the
// same Postgres: pgbench doing the naive alternative, one UPDATE per
// heartbeat. The design's claim is that batching makes heartbeats cheap: one
// statement per flush (about 1/s) however many nodes there are, where the
// naive way needs N/10 statements per second and has a ceiling of its own.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

type config struct {
	counts         []int
	duration       time.Duration
	settle         time.Duration
	interval       time.Duration
	staleAfter     time.Duration
	coordinator    string
	perClient      int
	inflight       int
	helloTimeout   time.Duration
	connectTimeout time.Duration
	pgbenchClients int
	pgbenchTime    time.Duration
	keepLogs       bool
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	nodesFlag := flag.String("nodes", "1000,10000", "comma-separated node counts; each gets a fresh database and coordinator")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Second, "measurement window per node count, after all nodes are connected")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Second, "wait after the last node connects before measuring, so the window sees steady state, not the ramp")
	flag.DurationVar(&cfg.interval, "heartbeat-interval", 10*time.Second, "heartbeat interval the coordinator tells nodes to use")
	flag.DurationVar(&cfg.staleAfter, "stale-after", 12*time.Second, "a node whose stored last_heartbeat_at is older than this at the end is stale")
	flag.StringVar(&cfg.coordinator, "coordinator", "", "podium-coordinator binary (e.g. bin/podium-coordinator from `make build`); built from source when empty")
	flag.IntVar(&cfg.perClient, "streams-per-conn", 200, "nodes per HTTP/2 connection (the Go server allows 250 concurrent streams per connection)")
	flag.IntVar(&cfg.inflight, "inflight", 500, "at most this many Hellos waiting for their HelloAck at once")
	flag.DurationVar(&cfg.helloTimeout, "hello-timeout", 15*time.Second, "a node gives up on a Hello after this long and retries with backoff (the agent's own value)")
	flag.DurationVar(&cfg.connectTimeout, "connect-timeout", 5*time.Minute, "give up waiting for every node to connect after this long and measure what is connected")
	flag.IntVar(&cfg.pgbenchClients, "pgbench-clients", 4, "pgbench client connections for the naive reference")
	flag.DurationVar(&cfg.pgbenchTime, "pgbench-time", 10*time.Second, "how long the pgbench reference runs")
	flag.BoolVar(&cfg.keepLogs, "keep-logs", false, "keep the coordinator's logs (and the work directory) instead of removing them at the end")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || n > 999999 {
			fmt.Fprintf(os.Stderr, "heartbeats: -nodes %q: want positive counts below 1,000,000, e.g. 1000,10000\n", *nodesFlag)
			return 2
		}
		cfg.counts = append(cfg.counts, n)
	}

	// ^C cancels ctx; every step waits on it and the deferred cleanups below
	// stop the coordinator and Postgres. A second ^C is swallowed so cleanup is
	// not cut short (each cleanup step has its own deadline).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	benchkit.RaiseFileLimit(log)
	loadStart := benchkit.LoadAvg()

	work, err := os.MkdirTemp("", "podium-bench-heartbeats-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "heartbeats:", err)
		return 1
	}
	defer func() {
		if cfg.keepLogs {
			log.Info("kept the coordinator logs", "dir", work)
			return
		}
		_ = os.RemoveAll(work)
	}()

	bin := cfg.coordinator
	if bin == "" {
		log.Info("building podium-coordinator")
		if bin, err = benchkit.BuildCoordinator(ctx, work); err != nil {
			fmt.Fprintln(os.Stderr, "heartbeats:", err)
			return 1
		}
	} else if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "heartbeats: -coordinator %s: %v (run `make build` first, or leave -coordinator empty to build it)\n", bin, err)
		return 1
	}

	log.Info("starting Postgres")
	cluster, err := pgtest.StartCluster("shared_preload_libraries=pg_stat_statements")
	if err != nil {
		fmt.Fprintln(os.Stderr, "heartbeats:", err)
		return 1
	}
	defer cluster.Stop()

	var results []result
	for _, n := range cfg.counts {
		r, err := measure(ctx, log, cfg, cluster, bin, work, n)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "heartbeats: interrupted; cleaned up")
				return 130
			}
			fmt.Fprintf(os.Stderr, "heartbeats: %d nodes: %v\n", n, err)
			return 1
		}
		printDetails(os.Stdout, r)
		results = append(results, r)
	}
	printTable(os.Stdout, cfg, results)
	fmt.Printf("machine: %d CPUs, load average %s at the start, %s at the end (other work on the machine skews every figure)\n",
		runtime.NumCPU(), loadStart, benchkit.LoadAvg())
	return 0
}
