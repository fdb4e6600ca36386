// Command taskstart measures what Podium adds to starting a container: the
// wall time of `podium run --image IMG -- true`, from exec to exit 0, beside
// `docker run --rm IMG true` on the same engine in the same run.
//
//	go run ./bench/taskstart -runs 20
//	go run ./bench/taskstart -bin bin -runs 20    # after `make build`
//
// It builds the four binaries (or takes them from -bin), starts a throwaway
// Postgres and a podium-coordinator subprocess, creates an enrollment token
// with `podium token create`, enrolls one podium-agent with its data directory
// in a temporary directory and starts it, and builds a busybox image locally
// (no registry is needed). After a few warm-up runs of each it alternates the
// two commands, one Podium run then one docker run, and prints the median, p90
// and minimum of each, the difference, and the check against the target:
// Podium adds under 60 ms. The agent keeps -network-pool task networks made
// ahead of the tasks (its --network-pool, 2 by default); -network-pool 0
// measures a task creating its own.
//
// It also breaks every Podium run down into where its time went, lining up
// the bench's own clock (exec, exit), the task's stored timestamps and status
// events (the coordinator's and the agent's, read through the API), and the
// Docker engine's events (network, volume and container created, started,
// exited, removed), all of them on this one machine's clock.
//
// Everything it started is stopped on exit and on ^C: the agent, every
// container, network and volume of its node, the coordinator, Postgres. The
// image is kept (it is 2 MB and the next run reuses it).
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
	"runtime"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

type config struct {
	runs     int
	warmup   int
	bin      string
	image    string
	target   time.Duration
	keepLogs bool
	// networkPool is the agent's --network-pool.
	networkPool int
	durable     bool
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	flag.IntVar(&cfg.runs, "runs", 20, "measured runs of each command, alternating")
	flag.IntVar(&cfg.warmup, "warmup", 2, "unmeasured runs of each command first")
	flag.StringVar(&cfg.bin, "bin", "", "directory holding podium, podium-agent, podium-runner and podium-coordinator (e.g. bin after `make build`); built from source when empty")
	flag.StringVar(&cfg.image, "image", "podium-bench/busybox:taskstart", "tag of the busybox image built for the runs")
	flag.DurationVar(&cfg.target, "target", 60*time.Millisecond, "what Podium may add to docker run's median (issue 17's goal)")
	flag.IntVar(&cfg.networkPool, "network-pool", executor.DefaultNetworkPool, "the agent's --network-pool: task networks it makes ahead of the tasks (0: each task creates its own as it starts)")
	flag.BoolVar(&cfg.durable, "durable", true, "Postgres with fsync, synchronous_commit and full_page_writes on, as in production; false: the fast test settings (labelled in the report)")
	flag.BoolVar(&cfg.keepLogs, "keep-logs", false, "keep the work directory (coordinator and agent logs) instead of removing it")
	flag.Parse()
	if cfg.runs < 1 || cfg.warmup < 0 || cfg.networkPool < 0 {
		fmt.Fprintln(os.Stderr, "taskstart: -runs must be at least 1, -warmup and -network-pool at least 0")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// ^C cancels ctx; every step waits on it and the cleanups below stop what
	// was started, each with its own deadline. The signals stay caught until
	// run returns, so a second ^C does not cut the cleanup short.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	fail := func(err error) int {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "taskstart: interrupted; cleaning up")
			return 130
		}
		fmt.Fprintln(os.Stderr, "taskstart:", err)
		return 1
	}

	loadStart := benchkit.LoadAvg()
	work, err := os.MkdirTemp("", "podium-bench-taskstart-")
	if err != nil {
		return fail(err)
	}
	cleanups = append(cleanups, func() {
		if cfg.keepLogs {
			log.Info("kept the work directory", "dir", work)
			return
		}
		_ = os.RemoveAll(work)
	})

	bins, err := findBinaries(ctx, log, cfg.bin, work)
	if err != nil {
		return fail(err)
	}
	env, err := startEnv(ctx, log, bins, work, cfg.networkPool, cfg.durable, &cleanups)
	if err != nil {
		return fail(err)
	}

	log.Info("building the image", "image", cfg.image)
	if err := dockertest.Build(ctx, cfg.image); err != nil {
		return fail(err)
	}

	cleanups = append(cleanups, func() { removeDockerObjects(benchLabel()) })
	watch, err := watchDocker()
	if err != nil {
		return fail(err)
	}
	cleanups = append(cleanups, watch.stop)

	log.Info("measuring", "warmup", cfg.warmup, "runs", cfg.runs)
	res, err := measure(ctx, log, cfg, env, watch)
	if err != nil {
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "taskstart: %v\nagent log (last lines):\n%s\ncoordinator log (last lines):\n%s\n",
			err, benchkit.Tail(env.agent.LogPath, 15), benchkit.Tail(env.coord.LogPath, 15))
		return 1
	}
	watch.stop()
	report(os.Stdout, cfg, res, watch)
	fmt.Printf("\n%s\n", benchkit.PostgresLine(cfg.durable))
	fmt.Printf("machine: %d CPUs, Docker %s, load average %s at the start, %s at the end (other work on the machine skews every figure)\n",
		runtime.NumCPU(), dockerVersion(), loadStart, benchkit.LoadAvg())
	if w := env.warnings(); w != "" {
		fmt.Print(w)
	}
	return 0
}
