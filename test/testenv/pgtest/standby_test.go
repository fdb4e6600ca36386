package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStandbyFailover checks the rig the failover rows stand on: a row
// committed on the primary is on its synchronous standby; after the primary
// quits (immediate) and the standby is promoted, a multi-host URL with
// target_session_attrs=read-write reaches the standby, which takes writes.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := NewCluster(t)
	standby := NewStandby(t, primary, true)
	if err := primary.exec(ctx, "create table kept (v int)", "insert into kept values (42)"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Down("immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	url := MultiHostURL("postgres", primary, standby.Cluster)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect with %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "insert into kept values (43)"); err != nil {
		t.Fatalf("write through %s: %v", url, err)
	}
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from kept where v = 42").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the row committed on the primary before the failover: count %d, err %v; want 1", n, err)
	}
}
