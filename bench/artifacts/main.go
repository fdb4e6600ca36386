// Command artifacts measures what an artifact upload through the coordinator
// costs: its throughput against writing the same bytes straight to the same
// object store, and how much the coordinator's memory grows while it streams
// a large artifact.
//
//	go run ./bench/artifacts -coordinator bin/podium-coordinator -size 1GiB
//
// It starts a throwaway Postgres and a versitygw (test/testenv/s3test), runs the
// real podium-coordinator binary as a subprocess — so that its resident memory
// is its own, read from /proc/<pid>/status — and plays a node over the real
// protocol: enroll, Hello, take an assignment, then UploadArtifact of -size
// pseudo-random bytes in 256 KiB chunks. VmRSS is sampled throughout and VmHWM
// (the kernel's own peak) read at the end.
//
// The reference, in the same run against the same versitygw, is minio-go's
// PutObject of the same bytes with the same part size and parts in flight the
// coordinator uses: the best the coordinator could do is match it, since it
// does exactly that after receiving the bytes. The design's targets: at least
// 80% of the reference's throughput, and less than 64 MiB of RSS growth for a
// 1 GiB artifact (the coordinator must never hold an artifact whole).
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
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

type config struct {
	coordinator string
	size        int64
	chunk       int
	partSize    int64
	parts       int
	rounds      int
	keep        bool
	durable     bool
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	size := flag.String("size", "1GiB", "artifact size, e.g. 1GiB or 200MiB")
	flag.StringVar(&cfg.coordinator, "coordinator", "bin/podium-coordinator", "the podium-coordinator binary (`make build` makes bin/podium-coordinator)")
	flag.IntVar(&cfg.chunk, "chunk", 256<<10, "bytes per upload message, as the agent sends them")
	flag.IntVar(&cfg.rounds, "rounds", 2, "how many times to measure each way, alternating, so neither gets a warm cache the other did not")
	flag.BoolVar(&cfg.durable, "durable", true, "Postgres with fsync, synchronous_commit and full_page_writes on, as in production; false: the fast test settings (labelled in the report)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the work directory (coordinator and versitygw logs)")
	flag.Parse()
	n, err := parseSize(*size)
	if err != nil {
		fmt.Fprintf(os.Stderr, "artifacts: -size %v\n", err)
		return 2
	}
	cfg.size = n
	// The coordinator's defaults; the reference uses the same.
	cfg.partSize, cfg.parts = 8<<20, 2
	if _, err := os.Stat(cfg.coordinator); err != nil {
		fmt.Fprintf(os.Stderr, "artifacts: -coordinator %s: %v (run `make build` first)\n", cfg.coordinator, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	work, err := os.MkdirTemp("", "podium-bench-artifacts-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "artifacts:", err)
		return 1
	}
	defer func() {
		if cfg.keep {
			log.Info("kept the work directory", "dir", work)
			return
		}
		_ = os.RemoveAll(work)
	}()
	if err := bench(ctx, log, cfg, work); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "artifacts: interrupted; cleaned up")
			return 130
		}
		fmt.Fprintln(os.Stderr, "artifacts:", err)
		return 1
	}
	return 0
}

func bench(ctx context.Context, log *slog.Logger, cfg config, work string) error {
	loadStart := benchkit.LoadAvg()
	log.Info("starting Postgres and versitygw", "durable", cfg.durable)
	cluster, err := pgtest.StartCluster(benchkit.PostgresSettings(cfg.durable)...)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	dbURL, err := benchkit.CreateDB(ctx, cluster, dbName)
	if err != nil {
		return err
	}
	s3, err := s3test.Launch(filepath.Join(work, "s3"))
	if err != nil {
		return err
	}
	defer s3.Stop()

	log.Info("starting the coordinator", "binary", cfg.coordinator)
	coord, err := startCoordinator(ctx, cfg.coordinator, dbURL, s3, work)
	if err != nil {
		return err
	}
	defer func() { _ = coord.Stop(10 * time.Second) }()

	node, err := newNode(ctx, coord.URL)
	if err != nil {
		return err
	}
	defer node.close()

	log.Info("computing the artifact's digest", "size", humanBytes(cfg.size))
	want := digestOf(cfg.size)

	var through, direct []result
	for i := range cfg.rounds {
		log.Info("upload through the coordinator", "round", i+1)
		r, err := uploadThroughCoordinator(ctx, cfg, coord, node, fmt.Sprintf("bench-%d.bin", i), want)
		if err != nil {
			return fmt.Errorf("through the coordinator: %w", err)
		}
		through = append(through, r)
		log.Info("upload straight to the object store", "round", i+1)
		r, err = uploadDirect(ctx, cfg, s3, fmt.Sprintf("direct/bench-%d.bin", i))
		if err != nil {
			return fmt.Errorf("straight to the object store: %w", err)
		}
		direct = append(direct, r)
	}
	report(os.Stdout, cfg, through, direct)
	if n, sample := coord.Warnings(); n > 0 {
		fmt.Printf("\nthe coordinator logged %d warnings, e.g.:\n  %s\n", n, strings.Join(sample, "\n  "))
	}
	fmt.Printf("\n%s\nmachine: %d CPUs, load average %s at the start, %s at the end (other work on the machine skews every figure)\n",
		benchkit.PostgresLine(cfg.durable), runtime.NumCPU(), loadStart, benchkit.LoadAvg())
	return nil
}

// parseSize reads 1GiB, 200MiB, 64KiB or a plain byte count.
func parseSize(v string) (int64, error) {
	num := strings.TrimRight(v, "KMGiB")
	shift, ok := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[v[len(num):]]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a size such as 1GiB, 200MiB or 1048576", v)
	}
	return n << shift, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
