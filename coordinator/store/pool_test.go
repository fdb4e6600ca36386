package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// An operator sizes the pool in the database URL (pool_max_conns, pgxpool's
// parameter). The pool takes it, and the direct connections a replica opens
// beside it (lease, bus, migrator) leave it out rather than send it to
// Postgres, which would refuse the connection over an unknown setting.
func TestPoolSizeFromTheDatabaseURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	url := db.URL + sep + "pool_max_conns=16"
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("open the store with %s: %v", url, err)
	}
	defer st.Close()
	if got := st.PoolSize(); got != 16 {
		t.Fatalf("the pool opens at most %d connections, want the URL's 16", got)
	}
	conn, err := store.ConnectDirect(ctx, url)
	if err != nil {
		t.Fatalf("a direct connection with pool_max_conns in the URL: %v", err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the direct connection answers %d, %v; want 1", one, err)
	}
}

// A pool size Postgres could never give is refused at start, naming the
// setting, rather than opening a pool that cannot work.
func TestPoolSizeRefusedWhenNotAPositiveNumber(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	for _, bad := range []string{"0", "-3", "many"} {
		st, err := store.Open(context.Background(), db.URL+sep+"pool_max_conns="+bad)
		if err == nil {
			st.Close()
			t.Fatalf("pool_max_conns=%s opened a store, want an error", bad)
		}
		if !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("pool_max_conns=%s: the error %q does not name the setting", bad, err)
		}
	}
}
