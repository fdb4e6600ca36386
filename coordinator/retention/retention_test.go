package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a database with the store on it and a direct connection for
// setting up rows and checking them.
type env struct {
	t    *testing.T
	ctx  context.Context
	st   *store.Store
	conn *pgx.Conn
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return &env{t: t, ctx: ctx, st: st, conn: conn}
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.conn.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.conn.QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// task stores a task in state that ended (if terminal) ago, with retain
// seconds of its own, two log events, an attempt, and an artifact.
func (e *env) task(id, state string, ago time.Duration, retain int64) {
	e.t.Helper()
	e.exec(`insert into podium.tasks (id, spec, state, finished_at, retain_seconds, last_seq, attempt)
		values ($1, '{"image":"busybox"}', $2,
			case when $2 in ('succeeded', 'failed', 'cancelled', 'lost') then now() - make_interval(secs => $3) end, $4, 2, 1)`,
		id, state, ago.Seconds(), retain)
	e.exec(`insert into podium.attempts (task_id, attempt, node_id, finished_at) values ($1, 1, 'node_x', now() - make_interval(secs => $2))`, id, ago.Seconds())
	e.exec(`insert into podium.task_events (task_id, seq, attempt, kind, data) values ($1, 1, 1, 'stdout', 'hello'), ($1, 2, 1, 'note', null)`, id)
	e.exec(`insert into podium.artifacts (id, task_id, attempt, node_id, name, size, sha256, object_key, created_at)
		values ($1 || '_a', $1, 1, 'node_x', 'out.txt', 5, repeat('0', 64), 'artifacts/' || $1, now() - make_interval(secs => $2))`, id, ago.Seconds())
}

func (e *env) queued() []string {
	e.t.Helper()
	keys, err := e.st.QueuedDeletions(e.ctx, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func pass(t *testing.T, e *env, cfg retention.Config) retention.Stats {
	t.Helper()
	st, err := retention.NewJob(cfg, retention.Deps{Store: e.st, Log: slog.New(slog.DiscardHandler)}).Pass(e.ctx)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return st
}

const day = taskspec.Day

// A terminal task past its retention goes with its log, attempts and
// artifacts; its objects are queued and a tombstone says when it went.
// Anything not yet due, or not terminal, stays. A task's own retain replaces
// --retain-tasks, shorter or longer.
func TestTasksExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task("task_old", store.Succeeded, 91*day, 0)
	e.task("task_recent", store.Failed, 89*day, 0)
	e.task("task_running", store.Running, 200*day, 0)
	e.task("task_short", store.Cancelled, 3*time.Hour, 7200)                        // retain: 2h
	e.task("task_long", store.Succeeded, 200*day, int64(taskspec.Year/time.Second)) // retain: 1y
	e.exec(`update podium.tasks set log_archive_key = 'logs/task_old.zst' where id = 'task_old'`)
	e.exec(`insert into podium.task_log_archives (task_id, data) values ('task_old', 'x')`)

	st := pass(t, e, retention.Config{Batch: 2})
	if st.Tasks != 2 {
		t.Errorf("expired %d tasks, want 2 (task_old, task_short)", st.Tasks)
	}
	for _, id := range []string{"task_old", "task_short"} {
		if _, err := e.st.GetTask(e.ctx, id); err != store.ErrNotFound {
			t.Errorf("%s: GetTask = %v, want ErrNotFound", id, err)
		}
		at, err := e.st.TaskExpiredAt(e.ctx, id)
		if err != nil || time.Since(at) > time.Hour {
			t.Errorf("%s: tombstone %v, %v; want one from now", id, at, err)
		}
	}
	for _, id := range []string{"task_recent", "task_running", "task_long"} {
		if _, err := e.st.GetTask(e.ctx, id); err != nil {
			t.Errorf("%s should be kept: %v", id, err)
		}
		if _, err := e.st.TaskExpiredAt(e.ctx, id); err != store.ErrNotFound {
			t.Errorf("%s has a tombstone: %v", id, err)
		}
	}
	for table, want := range map[string]int{"task_events": 0, "attempts": 0, "artifacts": 0, "task_log_archives": 0} {
		if n := e.count("select count(*) from podium."+table+" where task_id in ('task_old', 'task_short')", nil...); n != want {
			t.Errorf("%s rows of the expired tasks: %d, want %d", table, n, want)
		}
	}
	// The kept tasks' artifacts are past --retain-artifacts (30d) too, but
	// not task_running's: it has not ended.
	if got, want := e.queued(), []string{"artifacts/task_long", "artifacts/task_old", "artifacts/task_recent", "artifacts/task_short", "logs/task_old.zst"}; !slices.Equal(got, want) {
		t.Errorf("queued deletions %v, want %v", got, want)
	}
	// A second pass finds nothing.
	if st := pass(t, e, retention.Config{}); st.Removed() {
		t.Errorf("second pass removed %+v", st)
	}
}

// With --retain-logs shorter than the task's retention, the log goes (its
// events, its archive row or object) and the task stays, saying when its log
// expired, with its attempts and what they used.
func TestLogsExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task("task_a", store.Succeeded, 8*day, 0)
	e.task("task_b", store.Succeeded, 6*day, 0)
	e.exec(`update podium.tasks set log_archive_key = 'logs/task_a.zst', log_archived_seq = 2, log_archived_at = now() where id = 'task_a'`)

	st := pass(t, e, retention.Config{Logs: 7 * day})
	if st.Logs != 1 || st.Tasks != 0 {
		t.Errorf("expired %d logs and %d tasks, want 1 and 0", st.Logs, st.Tasks)
	}
	a, err := e.st.GetTask(e.ctx, "task_a")
	if err != nil || a.LogExpiredAt == nil {
		t.Fatalf("task_a: %v, log expired at %v; want it kept with log_expired_at set", err, a.LogExpiredAt)
	}
	if p := a.Proto(); p.GetLogExpiredAt() == nil {
		t.Error("the API's task has no log_expired_at")
	}
	if n := e.count("select count(*) from podium.task_events where task_id = 'task_a'"); n != 0 {
		t.Errorf("task_a keeps %d events", n)
	}
	if n := e.count("select count(*) from podium.attempts where task_id = 'task_a'"); n != 1 {
		t.Errorf("task_a keeps %d attempts, want its 1: what it used (podium.usage) outlives its log", n)
	}
	if n := e.count("select count(*) from podium.tasks where id = 'task_a' and log_archive_key is null and log_archived_at is not null"); n != 1 {
		t.Error("task_a still names its archive, or is back in the archive job's queue")
	}
	if n := e.count("select count(*) from podium.task_events where task_id = 'task_b'"); n != 2 {
		t.Errorf("task_b has %d events, want its 2", n)
	}
	if got := e.queued(); !slices.Equal(got, []string{"logs/task_a.zst"}) {
		t.Errorf("queued %v, want the archive object", got)
	}
}

// Artifacts past --retain-artifacts go and their task says when; a running
// task's wait for it to end.
func TestArtifactsExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task("task_a", store.Succeeded, 31*day, 0)
	e.task("task_b", store.Succeeded, 29*day, 0)
	e.task("task_c", store.Running, 40*day, 0)
	st := pass(t, e, retention.Config{})
	if st.Artifacts != 1 {
		t.Errorf("expired %d artifacts, want 1", st.Artifacts)
	}
	a, _ := e.st.GetTask(e.ctx, "task_a")
	if a.ArtifactsExpiredAt == nil || a.LogExpiredAt != nil {
		t.Errorf("task_a: artifacts expired at %v, log at %v; want artifacts only", a.ArtifactsExpiredAt, a.LogExpiredAt)
	}
	if n := e.count("select count(*) from podium.artifacts"); n != 2 {
		t.Errorf("%d artifacts left, want 2", n)
	}
	if got := e.queued(); !slices.Equal(got, []string{"artifacts/task_a"}) {
		t.Errorf("queued %v", got)
	}
}

// Spent tokens, commands done with, old audit rows and old tombstones go.
func TestHousekeepingExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(`insert into podium.enrollment_tokens (token_hash, expires_at, used_at) values
		('\x01', now() - interval '8 days', null),     -- expired unused a week ago: goes
		('\x02', now() - interval '1 minute', null),   -- just expired: stays, to say "expired"
		('\x03', now() - interval '1 day', now() - interval '8 days'),  -- used 8 days ago: goes
		('\x04', now() - interval '1 day', now() - interval '6 days')   -- used 6 days ago: stays`)
	e.task("task_done", store.Succeeded, 2*time.Hour, 0)
	e.task("task_run", store.Running, 0, 0)
	e.exec(`insert into podium.node_commands (node_id, kind, task_id, created_at, delivered_at) values
		('n', 'assign', 'task_run', now() - interval '3 hours', now() - interval '2 hours'),   -- delivered long ago: goes
		('n', 'cancel', 'task_run', now() - interval '10 minutes', now() - interval '5 minutes'), -- just delivered: stays
		('n', 'cancel', 'task_done', now() - interval '3 hours', null),   -- undelivered, task long over: goes
		('n', 'cancel', 'task_gone', now() - interval '3 hours', null),   -- undelivered, task gone: goes
		('n', 'assign', 'task_run', now() - interval '3 hours', null),    -- undelivered, task running: stays
		('n', 'config', '', now() - interval '3 days', null)             -- a node's own: stays`)
	e.exec(`insert into podium.audit_log (at, who, role, transport, action, result) values
		(now() - interval '400 days', 'a', 'admin', 'local', 'X', 'ok'), (now() - interval '300 days', 'a', 'admin', 'local', 'X', 'ok')`)
	e.exec(`insert into podium.expired_tasks (id, expired_at) values ('task_t1', now() - interval '400 days'), ('task_t2', now() - interval '1 day')`)

	st := pass(t, e, retention.Config{})
	if st.Tokens != 2 || st.Commands != 3 || st.Audit != 1 || st.Tombstones != 1 {
		t.Errorf("removed %+v; want 2 tokens, 3 commands, 1 audit row, 1 tombstone", st)
	}
	if n := e.count(`select count(*) from podium.enrollment_tokens where token_hash in ('\x02', '\x04')`); n != 2 {
		t.Errorf("%d of the 2 tokens to keep are left", n)
	}
	if n := e.count(`select count(*) from podium.node_commands`); n != 3 {
		t.Errorf("%d commands left, want 3", n)
	}
	if _, err := e.st.TaskExpiredAt(e.ctx, "task_t2"); err != nil {
		t.Errorf("recent tombstone: %v", err)
	}
}

// Settings out of bounds are refused naming the flag; logs and artifacts
// kept longer than tasks are capped, with a log line.
func TestConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  retention.Config
		says string
	}{
		{retention.Config{Tasks: 30 * time.Second}, "--retain-tasks 30s: want 1m to 100y"},
		{retention.Config{Logs: 101 * taskspec.Year}, "--retain-logs"},
		{retention.Config{Artifacts: -time.Hour}, "--retain-artifacts"},
		{retention.Config{Audit: time.Second}, "--retain-audit"},
		{retention.Config{Every: time.Microsecond}, "--retention-every"},
		{retention.Config{Every: 25 * time.Hour}, "--retention-every"},
	} {
		if err := tc.cfg.Check(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Check(%+v) = %v, want %q", tc.cfg, err, tc.says)
		}
	}
	if err := (retention.Config{Tasks: 7 * day, Logs: 2 * day, Every: 50 * time.Millisecond}).Check(); err != nil {
		t.Errorf("a good config refused: %v", err)
	}
	var logged bytes.Buffer
	j := retention.NewJob(retention.Config{Tasks: 10 * day, Logs: 20 * day, Artifacts: 30 * day}, retention.Deps{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	c := j.Config()
	if c.Logs != 0 || c.Artifacts != 10*day || c.Audit != retention.DefaultAudit {
		t.Errorf("effective config %+v; want logs as tasks, artifacts capped at 10d", c)
	}
	for _, want := range []string{"--retain-logs is longer than --retain-tasks", "--retain-artifacts is longer than --retain-tasks"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log %q does not say %q", logged.String(), want)
		}
	}
}

const bucket = "podium-artifacts"

func objectStore(t *testing.T, e *env) (*s3test.Server, *artifacts.Service, *minio.Client) {
	t.Helper()
	s3 := s3test.Start(t)
	arts, err := artifacts.New(artifacts.Config{Endpoint: s3.Endpoint, Bucket: bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey},
		e.st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(e.ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return s3, arts, c
}

func (e *env) objects(s3 *s3test.Server) []string {
	e.t.Helper()
	objs, _, err := s3.Objects(e.ctx, bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(objs)
	return objs
}

// The sweeper removes queued objects from the store and then their queue
// rows; a key whose object is already gone counts as removed; objects no row
// queued are left alone.
func TestSweeperRemovesQueuedObjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s3, arts, c := objectStore(t, e)
	for _, k := range []string{"artifacts/a", "artifacts/b", "logs/c.zst", "artifacts/keep"} {
		if _, err := c.PutObject(e.ctx, bucket, k, strings.NewReader(k), int64(len(k)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`insert into podium.object_deletions (key) values ('artifacts/a'), ('artifacts/b'), ('logs/c.zst'), ('artifacts/missing')`)
	sw := retention.NewSweeper(retention.Config{Batch: 2}, retention.Deps{Store: e.st, Objects: arts, Log: slog.New(slog.DiscardHandler)})
	n, err := sw.Sweep(e.ctx)
	if err != nil || n != 4 {
		t.Fatalf("Sweep = %d, %v; want 4 removed", n, err)
	}
	if got := e.objects(s3); !slices.Equal(got, []string{"artifacts/keep"}) {
		t.Errorf("objects left %v, want only artifacts/keep", got)
	}
	if q := e.queued(); len(q) != 0 {
		t.Errorf("still queued: %v", q)
	}
}

// syncBuffer is a log both the sweeper's goroutine and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While the object store is down nothing leaves the queue, the sweeper says
// so once, and once the store is back the queue drains.
func TestSweeperRidesOutAnObjectStoreOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s3, arts, c := objectStore(t, e)
	for i := range 3 {
		k := fmt.Sprintf("artifacts/%d", i)
		if _, err := c.PutObject(e.ctx, bucket, k, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		e.exec(`insert into podium.object_deletions (key) values ($1)`, k)
	}
	s3.Stop()
	var logged syncBuffer
	sw := retention.NewSweeper(retention.Config{Every: 20 * time.Millisecond}, retention.Deps{Store: e.st, Objects: arts, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if n, err := sw.Sweep(e.ctx); err == nil || n != 0 {
		t.Fatalf("Sweep with the store down = %d, %v; want an error and nothing removed", n, err)
	}
	if q := e.queued(); len(q) != 3 {
		t.Fatalf("queue %v after a failed sweep; want all 3 kept", q)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wait.For(t, 30*time.Second, "the sweeper to log the outage", func() bool {
		return strings.Contains(logged.String(), "cannot remove queued objects")
	})
	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "the queue to drain once the store is back", func() bool { return len(e.queued()) == 0 })
	if got := e.objects(s3); len(got) != 0 {
		t.Errorf("objects left: %v", got)
	}
	if n := strings.Count(logged.String(), "cannot remove queued objects"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, logged.String())
	}
}

// podium.storage has a row per table of schema podium, with bytes and an
// estimate of rows, then the summary: the database's size, the oldest task,
// the archive backlog and the deletion queue, counted exactly.
func TestStorageView(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task("task_a", store.Succeeded, time.Hour, 0)
	e.task("task_b", store.Running, 0, 0)
	e.exec(`update podium.tasks set created_at = '2026-01-02T03:04:05Z' where id = 'task_a'`)
	e.exec(`insert into podium.object_deletions (key) values ('k1'), ('k2')`)
	e.exec(`analyze podium.tasks`)
	rows, err := e.st.Storage(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]store.StorageRow{}
	summary := map[string]store.StorageRow{}
	for i, r := range rows {
		switch r.Kind {
		case "table":
			if len(summary) > 0 {
				t.Errorf("row %d: table %s after the summary", i, r.Name)
			}
			tables[r.Name] = r
		case "summary":
			summary[r.Name] = r
		default:
			t.Errorf("row %d: kind %q", i, r.Kind)
		}
	}
	for _, name := range []string{"tasks", "task_events", "artifacts", "object_deletions", "expired_tasks", "audit_log", "schema_migrations"} {
		r, ok := tables[name]
		if !ok {
			t.Errorf("no row for table %s", name)
			continue
		}
		if r.Bytes == nil || *r.Bytes <= 0 || r.Size == nil || *r.Size == "" {
			t.Errorf("table %s: bytes %v, size %v", name, r.Bytes, r.Size)
		}
	}
	if r := tables["tasks"]; r.Rows == nil || *r.Rows != 2 {
		t.Errorf("tasks rows (analyzed) = %v, want 2", r.Rows)
	}
	if r := summary["database"]; r.Bytes == nil || *r.Bytes <= *tables["tasks"].Bytes {
		t.Errorf("database bytes %v", r.Bytes)
	}
	if r := summary["tasks"]; r.Oldest == nil || !r.Oldest.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("oldest task %v", r.Oldest)
	}
	if r := summary["archive backlog"]; r.Rows == nil || *r.Rows != 1 || r.Oldest == nil {
		t.Errorf("archive backlog %v since %v, want 1", r.Rows, r.Oldest)
	}
	if r := summary["object deletions"]; r.Rows == nil || *r.Rows != 2 || r.Oldest == nil {
		t.Errorf("object deletions %v, want 2", r.Rows)
	}
}
