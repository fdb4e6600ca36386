package schema_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/internal/testenv/pgtest"
	"github.com/podiumhq/podium/schema"
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
