package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func exec(t *testing.T, url string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// scrape reads /metrics as Prometheus would and returns its sample lines.
func scrape(t *testing.T, m *metrics.Metrics) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, body)
	}
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

func mustHave(t *testing.T, lines []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("/metrics lacks %q; it has:\n%s", w, strings.Join(lines, "\n"))
		}
	}
}

const seed = `insert into podium.tasks (id, spec, state) values
	('task_q1', '{}', 'queued'), ('task_q2', '{}', 'queued'), ('task_r', '{}', 'running'),
	('task_s1', '{}', 'succeeded'), ('task_s2', '{}', 'succeeded'), ('task_s3', '{}', 'succeeded');
insert into podium.nodes (id, key_hash, status) values
	('node_1', '\x00', 'online'), ('node_2', '\x00', 'online'), ('node_3', '\x00', 'offline')`

// The fleet's shape is read from Postgres at each scrape: every task state and
// node status is named, zero included, with the count in the tables now; what
// this replica did (ingest, flushes, dispatch, doorbells, sessions) is
// counted beside it.
func TestMetricsNameTheFleetFromTheDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	exec(t, db.URL, seed)
	sessions := 4
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := metrics.NewWith(metrics.Config{Now: func() time.Time { return now }}, openStore(t, db.URL), func() int { return sessions }, quiet)
	m.Ingested(3, 100)
	m.Flushed(5*time.Millisecond, 7)
	m.Dispatched(50 * time.Millisecond)
	m.Delivered(store.ChannelSubmit)
	m.Delivered(store.ChannelSubmit)

	mustHave(t, scrape(t, m),
		`podium_tasks{state="queued"} 2`,
		`podium_tasks{state="scheduled"} 0`,
		`podium_tasks{state="provisioning"} 0`,
		`podium_tasks{state="running"} 1`,
		`podium_tasks{state="succeeded"} 3`,
		`podium_tasks{state="failed"} 0`,
		`podium_tasks{state="cancelled"} 0`,
		`podium_tasks{state="lost"} 0`,
		`podium_nodes{status="online"} 2`,
		`podium_nodes{status="unreachable"} 0`,
		`podium_nodes{status="offline"} 1`,
		`podium_node_sessions 4`,
		`podium_events_ingested_total 3`,
		`podium_log_bytes_ingested_total 100`,
		`podium_heartbeats_written_total 7`,
		`podium_heartbeat_flush_seconds_count 1`,
		`podium_dispatch_latency_seconds_count 1`,
		`podium_bus_deliveries_total{channel="`+store.ChannelSubmit+`"} 2`,
	)

	// The fleet's reading is kept for the cache's interval: a change in
	// the tables shows at the first scrape after it; what this replica
	// counts itself shows at once.
	exec(t, db.URL,
		"update podium.tasks set state = 'failed' where id = 'task_r'",
		"update podium.nodes set status = 'unreachable' where id = 'node_2'")
	sessions = 3
	mustHave(t, scrape(t, m), `podium_tasks{state="running"} 1`, `podium_node_sessions 3`)
	now = now.Add(metrics.DefaultCacheFor)
	mustHave(t, scrape(t, m),
		`podium_tasks{state="running"} 0`,
		`podium_tasks{state="failed"} 1`,
		`podium_nodes{status="online"} 1`,
		`podium_nodes{status="unreachable"} 1`,
		`podium_node_sessions 3`,
	)
}

// A scrape while Postgres cannot be read still answers with what this replica
// counted itself, and leaves out the fleet rather than reporting zeros.
func TestMetricsWithoutTheDatabaseLeaveTheFleetOut(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	exec(t, db.URL, seed)
	st := openStore(t, db.URL)
	m := metrics.New(st, func() int { return 1 }, quiet)
	m.Ingested(2, 10)
	st.Close()
	lines := scrape(t, m)
	mustHave(t, lines, `podium_node_sessions 1`, `podium_events_ingested_total 2`)
	for _, l := range lines {
		if strings.HasPrefix(l, "podium_tasks{") || strings.HasPrefix(l, "podium_nodes{") {
			t.Errorf("a scrape that could not read Postgres reported %q", l)
		}
	}
}

// A nil *Metrics records nothing and does not panic, so packages work without
// instruments.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	m.Ingested(1, 1)
	m.Flushed(time.Millisecond, 1)
	m.Dispatched(time.Millisecond)
	m.Delivered("x")
}

// However often and however many at once scrape, the gauges are read from
// Postgres once per interval: 20 concurrent scrapes and 20 more in a row
// make one read, counted by podium_metrics_sql_reads_total; the first
// scrape after the interval makes the second.
func TestScrapesShareOneSQLReadPerInterval(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	exec(t, db.URL, seed)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := metrics.NewWith(metrics.Config{CacheFor: 10 * time.Second, Now: clock}, openStore(t, db.URL), func() int { return 0 }, quiet)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `podium_tasks{state="queued"} 2`) {
				t.Errorf("a concurrent scrape: %d\n%s", rec.Code, rec.Body.String())
			}
		})
	}
	wg.Wait()
	for range 20 {
		scrape(t, m)
	}
	if n := m.SQLReads(); n != 1 {
		t.Errorf("40 scrapes within the interval read Postgres %d times, want 1", n)
	}
	mu.Lock()
	now = now.Add(10 * time.Second)
	mu.Unlock()
	// The scrape past the interval reads again; the counter is gathered
	// beside that read (the registry gathers collectors concurrently), so
	// the scrape after it is the one that must show it.
	scrape(t, m)
	mustHave(t, scrape(t, m), "podium_metrics_sql_reads_total 2")
	if n := m.SQLReads(); n != 2 {
		t.Errorf("after the interval: %d reads, want 2", n)
	}
}

// With a token, /metrics answers only a request that carries it as a
// bearer token: none or a wrong one is 401 saying what to send.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	const token = "metrics-token-0123456789abcdef0123456789"
	m := metrics.NewWith(metrics.Config{Token: token}, openStore(t, db.URL), func() int { return 0 }, quiet)
	for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "--metrics-token-file") ||
			strings.Contains(rec.Body.String(), "podium_") {
			t.Errorf("Authorization %q: %d %s; want 401 naming --metrics-token-file and no metrics", auth, rec.Code, rec.Body.String())
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "podium_node_sessions 0") {
		t.Errorf("the right token: %d %s; want 200 and the metrics", rec.Code, rec.Body.String())
	}
}
