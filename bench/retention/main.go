// Command retention measures the retention job (coordinator/retention) on a
// large backlog: it fills a durable Postgres with terminal tasks past their
// retention, each with log events (and every tenth with an artifact), runs
// the job until nothing is due, and prints how fast it removed them, its
// longest statement, and meanwhile the latency of a small concurrent write
// (one task inserted every 10 ms) next to the same write's latency measured
// before the job started, in the same run.
//
//	go run ./bench/retention -tasks 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		stop()
		os.Exit(benchkit.Exit(ctx, "retention", err))
	}
}

type options struct {
	tasks, events, eventBytes, batch int
	refEvery, refFor                 time.Duration
	durable                          bool
}

func run(ctx context.Context) error {
	var o options
	flag.IntVar(&o.tasks, "tasks", 1_000_000, "terminal tasks past their retention to expire")
	flag.IntVar(&o.events, "events", 5, "log events per task")
	flag.IntVar(&o.eventBytes, "event-bytes", 64, "bytes of output per event")
	flag.IntVar(&o.batch, "batch", retention.DefaultBatch, "rows per statement (retention.Config.Batch)")
	flag.DurationVar(&o.refEvery, "ref-every", 10*time.Millisecond, "how often the reference write runs")
	flag.DurationVar(&o.refFor, "ref-for", 10*time.Second, "how long the reference write is measured alone, before the job")
	flag.BoolVar(&o.durable, "durable", true, "run Postgres durable (fsync, synchronous_commit, full_page_writes on), as production does")
	flag.Parse()
	if o.tasks <= 0 || o.events < 0 || o.eventBytes <= 0 || o.batch <= 0 || o.refEvery <= 0 {
		return fmt.Errorf("-tasks, -event-bytes, -batch and -ref-every must be positive, -events not negative")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	load := benchkit.LoadAvg()
	settings := []string{"shared_buffers=256MB", "max_wal_size=4GB"}
	if o.durable {
		settings = append(settings, "fsync=on", "synchronous_commit=on", "full_page_writes=on")
	}
	log.Info("starting Postgres", "durable", o.durable)
	cluster, err := pgtest.StartCluster(settings...)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	url, err := benchkit.CreateDB(ctx, cluster, "bench_retention")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	start := time.Now()
	if err := fill(ctx, pool, o, log); err != nil {
		return err
	}
	fillTook := time.Since(start)
	var dbBefore int64
	if err := pool.QueryRow(ctx, "select pg_database_size(current_database())").Scan(&dbBefore); err != nil {
		return err
	}

	// The reference: the small write alone.
	alone, err := measureWrites(ctx, pool, o.refEvery, func(stop <-chan struct{}) {
		select {
		case <-stop:
		case <-time.After(o.refFor):
		}
	})
	if err != nil {
		return err
	}

	st, err := store.Open(ctx, url)
	if err != nil {
		return err
	}
	defer st.Close()
	job := retention.NewJob(retention.Config{Batch: o.batch}, retention.Deps{Store: st, Log: log})
	var total retention.Stats
	var jobTook time.Duration
	var jobErr error
	during, err := measureWrites(ctx, pool, o.refEvery, func(<-chan struct{}) {
		t0 := time.Now()
		for {
			s, err := job.Pass(ctx)
			total.Tasks += s.Tasks
			total.Artifacts += s.Artifacts
			total.Statements += s.Statements
			total.Longest = max(total.Longest, s.Longest)
			if err != nil {
				jobErr = err
				break
			}
			if s.Tasks == 0 {
				break
			}
		}
		jobTook = time.Since(t0)
	})
	if err != nil {
		return err
	}
	if jobErr != nil {
		return jobErr
	}
	var left, queued, tombs int64
	if err := pool.QueryRow(ctx, `select (select count(*) from podium.tasks where state = 'succeeded'),
		(select count(*) from podium.object_deletions), (select count(*) from podium.expired_tasks)`).Scan(&left, &queued, &tombs); err != nil {
		return err
	}
	if left != 0 || tombs != int64(o.tasks) {
		return fmt.Errorf("after the job: %d expired tasks left, %d tombstones; want 0 and %d", left, tombs, o.tasks)
	}

	fmt.Printf("retention job on %d terminal tasks past retention, %d events of %d bytes each, an artifact on every tenth\n",
		o.tasks, o.events, o.eventBytes)
	fmt.Printf("Postgres 15, durable=%v (fsync, synchronous_commit, full_page_writes), shared_buffers=256MB; database %d MB before; filled in %s\n",
		o.durable, dbBefore>>20, fillTook.Round(time.Second))
	fmt.Printf("  expired:      %d tasks in %s = %.0f tasks/s (%d statements of up to %d tasks; %d object keys queued)\n",
		total.Tasks, jobTook.Round(time.Millisecond), float64(total.Tasks)/jobTook.Seconds(), total.Statements, o.batch, queued)
	fmt.Printf("  statements (each its own transaction): mean %s, longest %s\n",
		(jobTook / time.Duration(max(total.Statements, 1))).Round(time.Microsecond), total.Longest.Round(time.Microsecond))
	fmt.Printf("  reference write (insert one task every %s), alone:        %s\n", o.refEvery, alone)
	fmt.Printf("  reference write,                    while the job runs: %s\n", during)
	fmt.Printf("machine: %d CPUs, load average %s at the start, %s at the end (other work on the machine skews every figure)\n",
		runtime.NumCPU(), load, benchkit.LoadAvg())
	return nil
}

// fill inserts the backlog with generate_series, a chunk per transaction,
// then analyzes, as autovacuum would have long since done on a real table.
func fill(ctx context.Context, pool *pgxpool.Pool, o options, log *slog.Logger) error {
	const chunk = 100_000
	for from := 1; from <= o.tasks; from += chunk {
		to := min(from+chunk-1, o.tasks)
		log.Info("filling", "tasks", fmt.Sprintf("%d-%d", from, to))
		_, err := pool.Exec(ctx, `
			insert into podium.tasks (id, spec, state, created_at, started_at, finished_at, last_seq)
			select 'task_bench' || lpad(g::text, 10, '0'), '{"image":"busybox"}'::jsonb, 'succeeded',
				now() - interval '100 days' - g * interval '1 ms', now() - interval '100 days',
				now() - interval '100 days' + g * interval '1 ms', $3
			from generate_series($1::int, $2::int) g`, from, to, o.events)
		if err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}
		if o.events > 0 {
			_, err = pool.Exec(ctx, `
				insert into podium.task_events (task_id, seq, attempt, kind, log_offset, data)
				select 'task_bench' || lpad(g::text, 10, '0'), s, 1, 'stdout', (s - 1) * $4, convert_to(repeat('x', $4), 'UTF8')
				from generate_series($1::int, $2::int) g, generate_series(1, $3::int) s`, from, to, o.events, o.eventBytes)
			if err != nil {
				return fmt.Errorf("insert events: %w", err)
			}
		}
		_, err = pool.Exec(ctx, `
			insert into podium.artifacts (id, task_id, attempt, node_id, name, size, sha256, object_key, created_at)
			select 'artifact_bench' || g, 'task_bench' || lpad(g::text, 10, '0'), 1, 'node_bench', 'out.txt', 1,
				repeat('0', 64), 'bench/' || g, now() - interval '100 days'
			from generate_series($1::int, $2::int) g where g % 10 = 0`, from, to)
		if err != nil {
			return fmt.Errorf("insert artifacts: %w", err)
		}
	}
	log.Info("analyzing")
	_, err := pool.Exec(ctx, "vacuum analyze podium.tasks, podium.task_events, podium.artifacts")
	return err
}

// latencies summarises a write's latencies.
type latencies []time.Duration

func (l latencies) String() string {
	if len(l) == 0 {
		return "no writes"
	}
	s := slices.Clone(l)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d writes)", q(0.5), q(0.99), s[len(s)-1].Round(10*time.Microsecond), len(s))
}

// measureWrites inserts one queued task every `every` on its own connection
// while work runs, and returns each insert's latency. A writer blocked by a
// lock the job holds shows here as a long latency.
func measureWrites(ctx context.Context, pool *pgxpool.Pool, every time.Duration, work func(stop <-chan struct{})) (latencies, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var out latencies
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t0 := time.Now()
			_, err := conn.Exec(ctx, `insert into podium.tasks (id, spec) values ($1, '{"image":"busybox"}')`,
				fmt.Sprintf("task_ref%d_%d", time.Now().UnixNano(), i))
			if err != nil {
				werr = err
				return
			}
			out = append(out, time.Since(t0))
		}
	}()
	work(stop)
	close(stop)
	wg.Wait()
	return out, werr
}
