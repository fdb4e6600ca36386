// Command ingest measures the path of a task's output through Podium: from a
// node's stream into Postgres, and from Postgres back out through the CLI,
// against raw COPY of the same bytes into a table of the same shape on the
// same server in the same run.
//
//	go run ./bench/ingest -coordinator bin/podium-coordinator -podium bin/podium
//
// It starts a throwaway Postgres with production's durability (fsync,
// synchronous_commit and full_page_writes on; -durable=false for the fast
// test settings, labelled as such) and runs the real podium-coordinator as a
// subprocess. -nodes simulated nodes speak the real protocol, one HTTP/2
// connection each as real agents have, and each takes -per-node tasks at
// once. A task prints -output bytes of build-log-like text in -chunk events
// as fast as the coordinator acknowledges them: at most -window bytes
// unacknowledged per task, at most -message bytes per message (the agent's
// flow control, with no linger and no timers: the acks are the only brake).
//
// Then, in order:
//
//   - every task's log is read back through the API and its SHA-256 compared
//     with what the node printed (a figure counts only if it is byte-exact);
//   - COPY: the same chunks, by as many connections as there are nodes, each
//     COPY of -copy-rows rows its own transaction, into a table made LIKE
//     podium.task_events (same columns, checks, primary key and storage);
//   - podium run (the real CLI, -podium) of one task printing -run-output
//     bytes, its stdout read through a pipe: live delivery;
//   - podium logs of that task's stored log, to a pipe.
//
// It prints MB/s for each with the ratio to COPY, the coordinator's and
// Postgres's CPU per MB, the coordinator's RSS, the statements the
// coordinator ran (pg_stat_statements) and, with -profile, the top of a CPU
// profile of the coordinator taken during the ingest.
//
// It is a program, not a test: a timing bound belongs in a benchmark that a
// person reads, not in an assertion that flakes on a busy machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

type config struct {
	coordinator, podium string
	nodes, perNode      int
	perConn             int
	output, runOutput   int64
	chunk               int
	window, message     int
	copyRows            int
	durable             bool
	profile             bool
	stall               time.Duration
	keep                bool
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	var output, runOutput, chunk, window, message string
	flag.StringVar(&cfg.coordinator, "coordinator", "", "the podium-coordinator `binary` (bin/podium-coordinator after make build); built from source when empty")
	flag.StringVar(&cfg.podium, "podium", "bin/podium", "the podium CLI `binary` (make build); empty: skip the podium run and podium logs figures")
	flag.IntVar(&cfg.nodes, "nodes", 8, "simulated nodes")
	flag.IntVar(&cfg.perNode, "per-node", 4, "tasks each node runs at once")
	flag.IntVar(&cfg.perConn, "streams-per-conn", 1, "nodes per HTTP/2 connection (1: one connection per node, as real agents)")
	flag.StringVar(&output, "output", "16MiB", "output each task prints")
	flag.StringVar(&chunk, "chunk", "64KiB", "bytes per log event (the coordinator takes at most 64KiB)")
	flag.StringVar(&window, "window", "4MiB", "output a task may have unacknowledged")
	flag.StringVar(&message, "message", "4MiB", "a message's events at most, framing included (the coordinator reads at most 4MiB+64KiB)")
	flag.IntVar(&cfg.copyRows, "copy-rows", 64, "rows per COPY (each its own transaction) in the reference")
	flag.StringVar(&runOutput, "run-output", "256MiB", "output of the task podium run follows and podium logs prints")
	flag.BoolVar(&cfg.durable, "durable", true, "Postgres with fsync, synchronous_commit and full_page_writes on, as in production; false: the fast test settings (labelled in the report)")
	flag.BoolVar(&cfg.profile, "profile", true, "take a CPU profile of the coordinator during the ingest and print its top")
	flag.DurationVar(&cfg.stall, "stall-timeout", time.Minute, "give up when no task has finished for this long")
	flag.BoolVar(&cfg.keep, "keep-logs", false, "keep the work directory (coordinator log, profile) instead of removing it")
	flag.Parse()
	if err := cfg.check(output, runOutput, chunk, window, message); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var pg []string
	if cfg.durable {
		pg = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}
	}
	pg = append(pg, "shared_preload_libraries=pg_stat_statements")
	setup, err := benchkit.StartWith(ctx, log, "ingest", benchkit.FleetFlags{Coordinator: cfg.coordinator, KeepLogs: cfg.keep}, pg...)
	if err != nil {
		return benchkit.Exit(ctx, "ingest", err)
	}
	defer setup.Close()
	r, err := measure(ctx, log, cfg, setup)
	if err != nil {
		return benchkit.Exit(ctx, "ingest", err)
	}
	report(os.Stdout, cfg, r)
	fmt.Println(setup.Machine())
	return 0
}

// check says what is wrong with the flags, for an exit status of 2.
func (c *config) check(output, runOutput, chunk, window, message string) error {
	sizes := []struct {
		name string
		v    string
		to   *int64
	}{{"-output", output, &c.output}, {"-run-output", runOutput, &c.runOutput}}
	for _, s := range sizes {
		n, err := parseSize(s.v)
		if err != nil {
			return fmt.Errorf("%s %v", s.name, err)
		}
		*s.to = n
	}
	for _, s := range []struct {
		name string
		v    string
		to   *int
	}{{"-chunk", chunk, &c.chunk}, {"-window", window, &c.window}, {"-message", message, &c.message}} {
		n, err := parseSize(s.v)
		if err != nil {
			return fmt.Errorf("%s %v", s.name, err)
		}
		*s.to = int(n)
	}
	switch {
	case c.nodes <= 0 || c.perNode <= 0 || c.perConn <= 0 || c.copyRows <= 0:
		return errors.New("-nodes, -per-node, -streams-per-conn and -copy-rows must be positive")
	case c.chunk > 64<<10:
		return errors.New("-chunk: at most 64KiB, the coordinator's bound on a log event")
	case c.message > 4<<20:
		return errors.New("-message: at most 4MiB, within the coordinator's bound on a node message")
	case c.window < c.chunk:
		return errors.New("-window: at least one -chunk")
	}
	return nil
}

// parseSize reads 64KiB, 16MiB, 1GiB or a plain byte count.
func parseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}}
	for _, u := range units {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != num {
			break
		}
		return n << u.shift, nil
	}
	return 0, fmt.Errorf("%q: want a size such as 64KiB, 16MiB or 4096", v)
}
