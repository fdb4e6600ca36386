package schema_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Several replicas starting at once must apply each migration exactly once and
// all come up.
func TestMigrateConcurrentReplicas(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	c0, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close(ctx)
	// Start from an empty database, not the migrated template.
	if _, err := c0.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	applied := make([][]string, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close(ctx)
			applied[i], errs[i] = schema.Migrate(ctx, c)
		}()
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	ms, _ := schema.Migrations()
	if total != len(ms) {
		t.Fatalf("migrations applied %d times in all, want %d (each once)", total, len(ms))
	}
	var n int
	if err := c0.QueryRow(ctx, "select count(*) from podium.schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) {
		t.Fatalf("schema_migrations has %d rows, want %d", n, len(ms))
	}
}

// 0006 adds the columns placement checks a node's limits against; tasks
// already waiting when it is applied get them from their specs, sidecars
// included, so an upgrade does not place them as if they asked for nothing.
func TestNodeLimitsMigrationFillsWaitingTasks(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatal(err)
	}
	// The schema as it was before 0006.
	if _, err := schema.MigrateThrough(ctx, c, "0005_fillfactor"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateThrough(ctx, c, "0005"); err == nil || !strings.Contains(err.Error(), `no migration "0005"`) {
		t.Errorf("MigrateThrough of a name that is no migration: %v, want an error naming it", err)
	}
	specs := map[string]string{
		"task_waiting": `{"image": "busybox", "resources": {"pids": "100"}, "timeoutSeconds": "7200",
			"outputLimitBytes": "1048576", "allowEgress": ["10.0.0.0/8"],
			"sidecars": [{"name": "db", "resources": {"pids": "50"}}, {"name": "log"}]}`,
		"task_plain": `{"image": "busybox"}`,
		"task_done":  `{"image": "busybox", "timeoutSeconds": "60"}`,
	}
	for id, spec := range specs {
		state := "queued"
		if id == "task_done" {
			state = "succeeded"
		}
		if _, err := c.Exec(ctx, "insert into podium.tasks (id, spec, state) values ($1, $2, $3)", id, spec, state); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := schema.Migrate(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 || applied[0] != "0006_node_limits" {
		t.Fatalf("applied %v, want 0006_node_limits first", applied)
	}
	type row struct {
		pids, timeout, output int64
		egress                []string
	}
	want := map[string]row{
		"task_waiting": {150, 7200, 1 << 20, []string{"10.0.0.0/8"}},
		"task_plain":   {0, 0, 0, []string{}},
		"task_done":    {0, 0, 0, []string{}}, // finished: never placed again, left alone
	}
	for id, w := range want {
		var got row
		if err := c.QueryRow(ctx, "select pids, timeout_seconds, output_limit_bytes, allow_egress from podium.tasks where id = $1", id).
			Scan(&got.pids, &got.timeout, &got.output, &got.egress); err != nil {
			t.Fatal(err)
		}
		if got.pids != w.pids || got.timeout != w.timeout || got.output != w.output || strings.Join(got.egress, ",") != strings.Join(w.egress, ",") {
			t.Errorf("%s: %+v, want %+v", id, got, w)
		}
	}
}

// 0018 sets the tables that churn to be vacuumed after 2 % of their rows are dead,
// not autovacuum's default 20 %, and without the cost delay: the storage
// parameters are what Postgres reads for each table.
func TestChurningTablesHaveEarlyVacuumSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, table := range []string{"task_events", "tasks", "attempts", "task_log_archives"} {
		var opts []string
		if err := c.QueryRow(ctx, `select coalesce(c.reloptions, '{}') from pg_catalog.pg_class c
			join pg_catalog.pg_namespace n on n.oid = c.relnamespace
			where n.nspname = 'podium' and c.relname = $1`, table).Scan(&opts); err != nil {
			t.Fatalf("read the storage parameters of podium.%s: %v", table, err)
		}
		for _, want := range []string{"autovacuum_vacuum_scale_factor=0.02", "autovacuum_vacuum_cost_delay=0"} {
			if !slices.Contains(opts, want) {
				t.Errorf("podium.%s has storage parameters %v, want %s among them", table, opts, want)
			}
		}
	}
}

// 0035 records where each node label came from. Nodes enrolled before it
// get "token" for the labels their still-stored enrollment token gave and
// "unknown" for the rest (nobody recorded whether the node asked for them
// or an admin added them); a rekey token's (empty) labels give nothing.
func TestNodeLabelSourcesMigrationFillsEnrolledNodes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateThrough(ctx, c, "0031_user_groups"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`insert into podium.nodes (id, key_hash, hostname, labels) values
			('node_tok', '\x00', 'a', '{linux,gpu,prod-trusted}'),
			('node_gone', '\x00', 'b', '{ssd}'),
			('node_bare', '\x00', 'c', '{}')`,
		`insert into podium.enrollment_tokens (token_hash, labels, expires_at, used_at, used_by_node) values
			('\x01', '{linux,gpu}', now(), now(), 'node_tok')`,
		// A rekey token used by the node names no labels.
		`insert into podium.enrollment_tokens (token_hash, labels, expires_at, used_at, used_by_node, rekey_node) values
			('\x02', '{}', now(), now(), 'node_tok', 'node_tok')`,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := schema.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node_tok":  `{"gpu": {"source": "token"}, "linux": {"source": "token"}, "prod-trusted": {"source": "unknown"}}`,
		"node_gone": `{"ssd": {"source": "unknown"}}`,
		"node_bare": `{}`,
	}
	for id, w := range want {
		var got string
		if err := c.QueryRow(ctx, "select label_sources::text from podium.nodes where id = $1", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("%s: label_sources %s, want %s", id, got, w)
		}
	}
	var allow bool
	if err := c.QueryRow(ctx, `select allow_node_labels from podium.enrollment_tokens where token_hash = '\x01'`).Scan(&allow); err != nil || allow {
		t.Errorf("a token made before 0035 allows node labels: %v, %v", allow, err)
	}
}
