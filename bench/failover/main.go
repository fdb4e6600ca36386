// Command failover measures how long a fleet takes to move to the surviving
// coordinator replica when the one holding it dies, and what the move costs
// the tasks that were running.
//
//	go run ./bench/failover -coordinator bin/podium-coordinator -nodes 1000,10000
//
// For each fleet size it starts two real podium-coordinator replicas, A and B,
// on one Postgres (durable by default: fsync, synchronous_commit and
// full_page_writes on), lets A take the leader lock, and connects N simulated
// nodes to A. The nodes are the agent's own session code (agent/session) with
// a scripted runner instead of Docker, so they pick the next replica from the
// HelloAck's list and back off with the agent's jitter, exactly as a real
// agent does. Some tasks run on the nodes throughout, each writing a numbered
// line every -log-every. Then A is killed with SIGKILL — no hand-over, no
// goodbye — and the benchmark measures:
//
//   - when the first and the last node had their HelloAck from B, and when
//     podium.nodes showed every node online on B;
//   - the leader: when B took the leader lock, and when a task submitted to B
//     right after the kill reached a node;
//   - the running tasks: each must end SUCCEEDED in its first attempt on the
//     node it started on, with its stored log equal, byte for byte, to what the
//     node wrote across the switch (no event lost or doubled).
//
// The reference beside the re-home time is the same fleet connecting to A
// from nothing, every node at once, measured in the same run.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

type config struct {
	benchkit.FleetFlags
	counts         []int
	poolMaxConns   int
	tasks          int
	logEach        time.Duration
	before, after  time.Duration
	rehomeTimeout  time.Duration
	connectTimeout time.Duration
	profile        time.Duration
	snapshot       time.Duration
	batch          int
}

// The goals of issue 17, §4.
var goals = map[int]time.Duration{1000: 3 * time.Second, 10000: 10 * time.Second}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	nodesFlag := flag.String("nodes", "1000,10000", "comma-separated fleet sizes; each gets a fresh database and replicas")
	flag.IntVar(&cfg.poolMaxConns, "pool-max-conns", 0, "each replica's Postgres pool (pool_max_conns on its database URL); 0: the coordinator's default")
	flag.IntVar(&cfg.tasks, "tasks", 200, "tasks running on the nodes across the switch")
	flag.DurationVar(&cfg.logEach, "log-every", 100*time.Millisecond, "each running task writes one line this often")
	flag.DurationVar(&cfg.before, "before", 3*time.Second, "how long the tasks write on replica A before it is killed")
	flag.DurationVar(&cfg.after, "after", 3*time.Second, "how long the tasks write on replica B once every node is there")
	flag.DurationVar(&cfg.rehomeTimeout, "rehome-timeout", 2*time.Minute, "give up waiting for every node to reach replica B after this long")
	flag.DurationVar(&cfg.profile, "profile", 10*time.Second, "take a CPU profile of replica B for this long from the kill (0: none)")
	flag.IntVar(&cfg.batch, "connect-batch", 1000, "nodes first connect to replica A in waves of this many, each once the one before is on (0: all at once); the switch itself is never paced")
	flag.DurationVar(&cfg.snapshot, "goroutines-at", 2*time.Second, "when after the kill to list where replica B's goroutines wait")
	cfg.Register(flag.CommandLine, benchkit.FleetFlags{
		PerConn: 1, Inflight: 1, HelloTimeout: 15 * time.Second, ConnectTimeout: 5 * time.Minute,
		PgbenchClients: 1, Durable: true, // -durable is benchkit's flag
	})
	flag.Parse()
	cfg.connectTimeout = cfg.ConnectTimeout
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || n > 15000 {
			// Each node is one TCP connection on each side: the open-file
			// limit (20,000 here) bounds the fleet one process can hold.
			fmt.Fprintf(os.Stderr, "failover: -nodes %q: want counts from 1 to 15,000, e.g. 1000,10000\n", *nodesFlag)
			return 2
		}
		cfg.counts = append(cfg.counts, n)
	}
	if cfg.tasks < 1 || cfg.logEach <= 0 {
		fmt.Fprintln(os.Stderr, "failover: -tasks and -log-every must be positive")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	settings := []string{"shared_preload_libraries=pg_stat_statements"}
	if cfg.Durable {
		settings = append(settings, "fsync=on", "synchronous_commit=on", "full_page_writes=on")
	}
	setup, err := benchkit.StartWith(ctx, log, "failover", cfg.FleetFlags, settings...)
	if err != nil {
		return benchkit.Exit(ctx, "failover", err)
	}
	defer setup.Close()

	var results []result
	for _, n := range cfg.counts {
		r, err := measure(ctx, log, cfg, setup, n)
		if err != nil {
			return benchkit.Exit(ctx, "failover", fmt.Errorf("%d nodes: %w", n, err))
		}
		printDetails(os.Stdout, r)
		results = append(results, r)
	}
	printTable(os.Stdout, cfg, results)
	fmt.Println(setup.Machine())
	return 0
}
