package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// leader is a dispatcher running as the leader would run it, on a database
// with one online node, with its bus listening; it stops when the test ends.
type leader struct {
	st  *store.Store
	sql *pgx.Conn
}

func startLeader(t *testing.T, db pgtest.Database, cfg dispatch.Config) leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	sql, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 8}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{store.ChannelSubmit}}, bus.Deps{Log: log})
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Run(ctx) })
	wait.For(t, 30*time.Second, "the bus to listen", func() bool { return b.Ready() == nil })
	s := dispatch.New(cfg, dispatch.Deps{Store: st, Bus: b, Log: log})
	wg.Go(func() { _ = s.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = sql.Close(context.Background())
		st.Close()
	})
	return leader{st: st, sql: sql}
}

func (l leader) state(t *testing.T, id string) string {
	t.Helper()
	var state string
	if err := l.sql.QueryRow(context.Background(), "select state from podium.tasks where id = $1", id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

// A task can become queued with no doorbell heard: the notification was
// lost with the listener's connection, or the row was written by hand. The
// leader no longer reads the queue on every tick, so the slow safety pass is
// what finds it; with every other reason for a pass switched off (ticks an
// hour apart), the task is still placed.
func TestSafetyPassPlacesATaskQueuedWithoutADoorbell(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	l := startLeader(t, db, dispatch.Config{Tick: time.Hour, SweepInterval: time.Hour, SafetyPass: 200 * time.Millisecond})
	ctx := context.Background()
	// Through the store first: its doorbell proves the leader is running.
	if _, err := l.st.InsertTask(ctx, store.NewTask{ID: "task_rung", Spec: &podiumv1.TaskSpec{Image: "busybox"}, RequestedBy: "me"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the submitted task to be placed", func() bool { return l.state(t, "task_rung") == store.Scheduled })
	// A plain insert notifies no one.
	if _, err := l.sql.Exec(ctx, "insert into podium.tasks (id, spec) values ('task_silent', '{}')"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the task queued without a doorbell to be placed", func() bool { return l.state(t, "task_silent") == store.Scheduled })
}

// An idle leader does not read the tasks table on its ticks: with nothing
// queued, nothing waiting and no doorbell, the queue is not read at all.
// Postgres itself counts the statements (pg_stat_statements), and the
// sweep's own statement, run on every sweep, is the clock that proves the
// loop went round many times in the window.
func TestIdleLeaderDoesNotReadTheQueue(t *testing.T) {
	t.Parallel()
	cluster := pgtest.NewCluster(t, "shared_preload_libraries=pg_stat_statements")
	db := pgtest.NewDatabaseIn(t, cluster)
	l := startLeader(t, db, dispatch.Config{
		Tick: 10 * time.Millisecond, SweepInterval: 10 * time.Millisecond, SafetyPass: time.Hour,
		AckDeadline: time.Hour, // no node accepts the task: it must stay placed, not be taken back and queued again
	})
	ctx := context.Background()
	if _, err := l.sql.Exec(ctx, "create extension pg_stat_statements"); err != nil {
		t.Fatal(err)
	}
	// calls counts the statements run since the last reset whose text
	// matches pattern (pg_stat_statements keeps the text of a prepared
	// statement as it was sent, constants included).
	calls := func(pattern string) int64 {
		t.Helper()
		var n int64
		if err := l.sql.QueryRow(ctx, `select coalesce(sum(calls), 0)::bigint from pg_stat_statements
			where dbid = (select oid from pg_database where datname = current_database()) and query like $1`, pattern).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const queue = "%row_number() over w as k%"                  // the pass's claim
	const sweep = "%from podium.settings where id = %"          // the sweep reads the stored thresholds first
	const exists = "%select exists(select % from podium.tasks%" // the probe this test is about
	// The term's first pass reads the queue; a submitted task is placed by
	// the pass its doorbell starts. After that, nothing is queued or waiting.
	wait.For(t, 30*time.Second, "the term's first pass", func() bool { return calls(queue) > 0 || calls(exists) > 0 })
	if _, err := l.st.InsertTask(ctx, store.NewTask{ID: "task_a", Spec: &podiumv1.TaskSpec{Image: "busybox"}, RequestedBy: "me"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the task to be placed", func() bool { return l.state(t, "task_a") == store.Scheduled })
	// A pass already due when the task was placed (a doorbell heard twice,
	// one that rang while the placing pass ran) may still run once; a few
	// sweeps let it go by. From then on the leader is idle.
	reset := func() {
		t.Helper()
		if _, err := l.sql.Exec(ctx, "select pg_stat_statements_reset()"); err != nil {
			t.Fatal(err)
		}
	}
	reset()
	wait.For(t, 60*time.Second, "20 sweeps after the placement", func() bool { return calls(sweep) >= 20 })
	reset()
	wait.For(t, 60*time.Second, "50 sweeps (and as many ticks)", func() bool { return calls(sweep) >= 50 })
	if n, e := calls(queue), calls(exists); n != 0 || e != 0 {
		t.Fatalf("an idle leader read the queue %d times (%d of them asking whether anything is queued) in 50 sweeps; want 0", n+e, e)
	}
}
