// Command heartbeats measures how many nodes one coordinator replica can hold
// at the protocol's 10 s heartbeat interval, and what that costs.
//
//	go run ./bench/heartbeats -nodes 1000,10000,50000 -duration 60s
//
// It starts a throwaway Postgres (durable, as production runs it; -durable=false
// for the fast test settings, labelled), runs the real podium-coordinator
// binary as a subprocess (so its CPU and memory are its own, read from /proc,
// not mixed with the simulated nodes') and opens one real Connect stream per
// simulated node, each on a connection of its own over TLS (-tls=false for
// cleartext, -streams-per-conn to share), saying Hello and then heartbeating
// like an agent. Over a window it reports the replica's CPU, its resident
// memory (in total and per node) with the heap and goroutine profile that
// explain it, how many heartbeat statements and rows reached Postgres per
// flush (pg_stat_statements), and how many nodes' stored clocks went stale.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

type config struct {
	benchkit.FleetFlags
	counts     []int
	duration   time.Duration
	settle     time.Duration
	interval   time.Duration
	staleAfter time.Duration
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	nodesFlag := flag.String("nodes", "1000,10000,50000", "comma-separated node counts; each gets a fresh database and coordinator")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Second, "measurement window per node count, after all nodes are connected")
	flag.DurationVar(&cfg.settle, "settle", 10*time.Second, "wait after the last node connects before measuring, so the window sees steady state, not the ramp")
	flag.DurationVar(&cfg.interval, "heartbeat-interval", 10*time.Second, "heartbeat interval the coordinator tells nodes to use")
	flag.DurationVar(&cfg.staleAfter, "stale-after", 12*time.Second, "a node whose stored last_heartbeat_at is older than this at the end is stale")
	cfg.Register(flag.CommandLine, benchkit.FleetFlags{
		PerConn: 1, TLS: true, Durable: true, Inflight: 500, HelloTimeout: 15 * time.Second, ConnectTimeout: 5 * time.Minute,
		PgbenchClients: 4, PgbenchTime: 10 * time.Second,
	})
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
	if err := cfg.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "heartbeats:", err)
		return 2
	}

	// ^C cancels ctx; every step waits on it and the deferred cleanups below
	// stop the coordinator and Postgres. A second ^C is swallowed so cleanup is
	// not cut short (each cleanup step has its own deadline).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	setup, err := benchkit.Start(ctx, log, "heartbeats", cfg.FleetFlags)
	if err != nil {
		return benchkit.Exit(ctx, "heartbeats", err)
	}
	defer setup.Close()

	var results []result
	for _, n := range cfg.counts {
		r, err := measure(ctx, log, cfg, setup, n)
		if err != nil {
			return benchkit.Exit(ctx, "heartbeats", fmt.Errorf("%d nodes: %w", n, err))
		}
		printDetails(os.Stdout, r)
		results = append(results, r)
	}
	printTable(os.Stdout, cfg, setup, results)
	fmt.Println(setup.Machine())
	return 0
}
