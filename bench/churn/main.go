// Command churn measures whether the database stays bounded while tasks churn
// through it: N tasks, each printing -output bytes of build-log-like text,
// through the real coordinator with its log archive and retention jobs on
// and a short retention, sampling the database's size all along.
//
//	go run ./bench/churn -coordinator bin/podium-coordinator -tasks 1000000
//
// It starts a throwaway Postgres with production's durability (fsync,
// synchronous_commit and full_page_writes on; -durable=false for the fast
// settings, labelled as such), a versitygw as the object store the archives
// go to (-object-store none: they stay in the database as compressed rows),
// and runs the real podium-coordinator binary as a subprocess. Simulated
// nodes speak the real protocol, one HTTP/2 connection each as real agents
// have: for each Assign they report PROVISIONING, RUNNING, the task's output
// in chunks (deterministic text that compresses like a build log) and
// SUCCEEDED. Tasks go in through TaskService.Submit, at most -window of them
// unfinished at once, so the queue stays the size a busy fleet has.
//
// One run has two phases, each on a fresh database and a fresh coordinator:
//
//   - A, the reference: -phase-a-tasks tasks with the archive job off
//     (--log-archive=false) and retention at its defaults (nothing of a
//     short run is old enough to go): what dispatch does without them;
//   - B: -tasks tasks with --archive-after, --retain-tasks and
//     --retention-every short, so the jobs run all along.
//
// Every -sample it reads pg_database_size, the rows of podium.tasks and
// podium.task_events, the tasks whose log is archived and the archive's
// backlog, the tables' sizes and the object store's, and the coordinator's
// and Postgres's CPU; it prints the timeline, then the plateau (the largest
// size in the last third of phase B against the middle third), the archive's
// throughput (tasks/s) and dispatch's throughput in both phases, side by
// side.
//
// Until the coordinator has the archive and retention flags, -no-retention
// runs both phases without them (the database then grows, which is what the
// benchmark is there to show going away).
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
	coordinator    string
	nodes          int
	maxTasks       int32
	perConn        int
	inflight       int
	helloTimeout   time.Duration
	connectTimeout time.Duration

	tasks, phaseATasks int
	submitters         int
	rate               float64
	window             int
	output, chunk      int
	startDelay         time.Duration
	runTime            time.Duration
	linger             time.Duration

	durable     bool
	objectStore string

	noRetention    bool
	archiveAfter   string
	retainTasks    string
	retainLogs     string
	retentionEvery string
	coordArgs      string

	sampleEvery  time.Duration
	stall        time.Duration
	archiveDrain time.Duration
	timelineRows int
	keep         bool
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	var maxTasks int
	var output, chunk string
	flag.StringVar(&cfg.coordinator, "coordinator", "", "the podium-coordinator `binary` (bin/podium-coordinator after make build); built from source when empty")
	flag.IntVar(&cfg.nodes, "nodes", 150, "simulated nodes")
	flag.IntVar(&maxTasks, "max-tasks", 8, "slots per node")
	flag.IntVar(&cfg.perConn, "streams-per-conn", 1, "nodes per HTTP/2 connection (1: one connection per node, as real agents)")
	flag.IntVar(&cfg.inflight, "inflight", 100, "at most this many Hellos waiting for their HelloAck at once")
	flag.DurationVar(&cfg.helloTimeout, "hello-timeout", 15*time.Second, "a node gives up on a Hello after this long and retries with backoff")
	flag.DurationVar(&cfg.connectTimeout, "connect-timeout", 2*time.Minute, "give up waiting for every node to connect after this long")
	flag.IntVar(&cfg.tasks, "tasks", 1_000_000, "tasks through phase B (archive and retention on)")
	flag.IntVar(&cfg.phaseATasks, "phase-a-tasks", 50_000, "tasks through phase A, the reference with archive and retention off (0: skip it)")
	flag.IntVar(&cfg.submitters, "submitters", 16, "concurrent Submit callers")
	flag.Float64Var(&cfg.rate, "rate", 0, "offer at most this many tasks/s (0: as fast as the stack takes them); below the archive's rate the database can level off")
	flag.IntVar(&cfg.window, "window", 0, "at most this many tasks submitted and not yet finished (0: twice the fleet's slots)")
	flag.StringVar(&output, "output", "10KiB", "output each task prints, e.g. 10KiB, 1MiB")
	flag.StringVar(&chunk, "chunk", "4KiB", "bytes per log event at most (the agent's largest is 32KiB)")
	flag.DurationVar(&cfg.startDelay, "start-delay", 20*time.Millisecond, "a node reports RUNNING this long after accepting a task")
	flag.DurationVar(&cfg.runTime, "run-time", 200*time.Millisecond, "a task prints its output over this long, then succeeds")
	flag.DurationVar(&cfg.linger, "linger", 20*time.Millisecond, "output waits this long to be batched before it is sent (the agent's flush linger); status changes go at once")
	flag.BoolVar(&cfg.durable, "durable", true, "Postgres with fsync, synchronous_commit and full_page_writes on, as in production; false: the fast test settings (labelled in the report)")
	flag.StringVar(&cfg.objectStore, "object-store", "s3", "s3: a versitygw the coordinator archives logs to; none: no object store (archives are rows of podium.task_log_archives)")
	flag.BoolVar(&cfg.noRetention, "no-retention", false, "pass the coordinator none of the archive and retention flags (for a coordinator without them: the database then grows)")
	flag.StringVar(&cfg.archiveAfter, "archive-after", "10s", "phase B: --archive-after (empty: not passed, the coordinator's default)")
	flag.StringVar(&cfg.retainTasks, "retain-tasks", "2m", "phase B: --retain-tasks (empty: not passed)")
	flag.StringVar(&cfg.retainLogs, "retain-logs", "", "phase B: --retain-logs (empty: not passed; the coordinator's default is as tasks)")
	flag.StringVar(&cfg.retentionEvery, "retention-every", "5s", "phase B: --retention-every (empty: not passed)")
	flag.StringVar(&cfg.coordArgs, "coordinator-args", "", "more coordinator flags for both phases, space-separated (e.g. \"--retain-audit 1h\")")
	flag.DurationVar(&cfg.sampleEvery, "sample", 5*time.Second, "how often to sample the database")
	flag.DurationVar(&cfg.stall, "stall-timeout", 2*time.Minute, "give up on a phase when no task has finished for this long, and report what was")
	flag.DurationVar(&cfg.archiveDrain, "archive-drain", 3*time.Minute, "phase B: after the last task, keep sampling until the archive backlog is empty, at most this long")
	flag.IntVar(&cfg.timelineRows, "timeline-rows", 60, "print at most about this many samples per phase (every k-th; all are taken)")
	flag.BoolVar(&cfg.keep, "keep-logs", false, "keep the work directory (coordinator, versitygw logs) instead of removing it")
	flag.Parse()
	cfg.maxTasks = int32(maxTasks)
	if err := cfg.check(output, chunk); err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// ^C cancels ctx; every step waits on it and the deferred cleanups stop
	// the fleet, the coordinator, versitygw and Postgres, in that order, and
	// remove the work directory.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var pg []string
	if cfg.durable {
		pg = []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}
	}
	setup, err := benchkit.StartWith(ctx, log, "churn", benchkit.FleetFlags{Coordinator: cfg.coordinator, KeepLogs: cfg.keep}, pg...)
	if err != nil {
		return benchkit.Exit(ctx, "churn", err)
	}
	defer setup.Close()

	r, err := measure(ctx, log, cfg, setup)
	if err != nil {
		return benchkit.Exit(ctx, "churn", err)
	}
	report(os.Stdout, cfg, r)
	fmt.Println(setup.Machine())
	return 0
}

// check says what is wrong with the flags, for an exit status of 2.
func (c *config) check(output, chunk string) error {
	var err error
	if c.output, err = parseSize(output); err != nil {
		return fmt.Errorf("-output %v", err)
	}
	if c.chunk, err = parseSize(chunk); err != nil {
		return fmt.Errorf("-chunk %v", err)
	}
	switch {
	case c.nodes <= 0 || c.maxTasks <= 0 || c.perConn <= 0 || c.inflight <= 0 || c.submitters <= 0:
		return errors.New("-nodes, -max-tasks, -streams-per-conn, -inflight and -submitters must be positive")
	case c.tasks <= 0 || c.phaseATasks < 0:
		return errors.New("-tasks must be positive and -phase-a-tasks not negative")
	case c.rate < 0:
		return errors.New("-rate must not be negative (0: as fast as the stack takes them)")
	case c.window < 0:
		return errors.New("-window must not be negative (0: twice the fleet's slots)")
	case c.output > 64<<20:
		return errors.New("-output: at most 64MiB per task")
	case c.chunk > 32<<10:
		return errors.New("-chunk: at most 32KiB, the agent's largest log event (the coordinator refuses more than 64KiB)")
	case c.runTime < 0 || c.startDelay < 0 || c.linger < 0:
		return errors.New("-run-time, -start-delay and -linger must not be negative")
	case c.timelineRows <= 0:
		return errors.New("-timeline-rows must be positive")
	case c.sampleEvery < 100*time.Millisecond:
		return errors.New("-sample: at least 100ms (each sample counts rows)")
	case c.objectStore != "s3" && c.objectStore != "none":
		return fmt.Errorf("-object-store %q: want s3 or none", c.objectStore)
	}
	if c.window == 0 {
		c.window = 2 * c.nodes * int(c.maxTasks)
	}
	for name, v := range map[string]string{"-archive-after": c.archiveAfter, "-retain-tasks": c.retainTasks,
		"-retain-logs": c.retainLogs, "-retention-every": c.retentionEvery} {
		if _, err := parseRetention(v); err != nil && v != "" && !c.noRetention {
			return fmt.Errorf("%s %v", name, err)
		}
	}
	return nil
}

// phaseArgs are the coordinator flags of each phase, beyond the object
// store's: A with the archive job off, B with the jobs on and short. A flag
// given as empty is not passed (the coordinator's default), so the program
// runs against a coordinator that has some of the jobs and not others.
func (c *config) phaseArgs() (a, b []string) {
	extra := strings.Fields(c.coordArgs)
	if c.noRetention {
		return extra, extra
	}
	a = append([]string{"--log-archive=false"}, extra...)
	b = []string{"--log-archive=true"}
	for _, f := range [][2]string{{"--archive-after", c.archiveAfter}, {"--retain-tasks", c.retainTasks},
		{"--retain-logs", c.retainLogs}, {"--retention-every", c.retentionEvery}} {
		if f[1] != "" {
			b = append(b, f[0], f[1])
		}
	}
	return a, append(b, extra...)
}

// parseSize reads 10KiB, 1MiB or a plain byte count.
func parseSize(v string) (int, error) {
	num := strings.TrimRight(v, "KMGiB")
	shift, ok := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[v[len(num):]]
	var n int
	_, err := fmt.Sscanf(num, "%d", &n)
	if !ok || err != nil || n <= 0 || fmt.Sprint(n) != num {
		return 0, fmt.Errorf("%q: want a size such as 10KiB, 1MiB or 4096", v)
	}
	return n << shift, nil
}

// parseRetention reads a duration as the coordinator's retention flags take
// it: a Go duration (36h, 90s) or a whole number of days or years (90d, 1y).
func parseRetention(v string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "y": 365 * 24 * time.Hour} {
		if num, ok := strings.CutSuffix(v, suffix); ok {
			var n int
			if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != num {
				break
			}
			return time.Duration(n) * unit, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 10s, 2m, 36h, 90d or 1y", v)
	}
	return d, nil
}
