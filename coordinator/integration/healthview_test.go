package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// node_health.session_replica names the replica holding a node's stream only
// while that replica's lease holds the node's lock. A replica that dies
// without ending its sessions (SIGKILL: nothing runs after it) leaves its name
// in the node's row; Postgres drops its lease connection, and with it the
// lock, and the view stops naming it. The dead replica is played by a
// connection that holds the node's lock and wrote the row as a session does,
// then is killed; the live case is a real replica.
func TestNodeHealthForgetsADeadReplica(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	shown := func(node string) string {
		t.Helper()
		var replica *string
		if err := conn.QueryRow(ctx, "select session_replica from podium.node_health where node = $1", node).Scan(&replica); err != nil {
			t.Fatal(err)
		}
		if replica == nil {
			return ""
		}
		return *replica
	}

	// A live session is shown.
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	if got := shown(id); got != r.ReplicaID() {
		t.Fatalf("session_replica of a node with a live session: %q, want %q", got, r.ReplicaID())
	}
	_ = node.stream.CloseRequest()
	_ = node.stream.CloseResponse()
	coordtest.Eventually(t, 10*time.Second, "session_replica to clear when the session ends", func() bool { return shown(id) == "" })

	// A replica that holds the node's lock, wrote its session, and dies.
	dead, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close(context.Background())
	if _, err := dead.Exec(ctx, "select pg_advisory_lock($1)", lease.NodeKey(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Exec(ctx, `update podium.nodes set session_replica = 'replica_dead', session_lock = $2,
			session_epoch = session_epoch + 1 where id = $1`, id, lease.NodeKey(id)); err != nil {
		t.Fatal(err)
	}
	if got := shown(id); got != "replica_dead" {
		t.Fatalf("session_replica while the replica's lease holds the node: %q", got)
	}
	killBackend(t, ctx, db.URL, dead.PgConn().PID())
	coordtest.Eventually(t, 10*time.Second, "session_replica to clear once the dead replica's lease is gone", func() bool { return shown(id) == "" })
	var row string
	if err := conn.QueryRow(ctx, "select coalesce(session_replica, '') from podium.nodes where id = $1", id).Scan(&row); err != nil || row != "replica_dead" {
		t.Fatalf("the node's row says %q (%v): the test no longer plays a replica that died without cleaning up", row, err)
	}
}
