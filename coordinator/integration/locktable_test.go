package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// hello opens a node's stream and returns the coordinator's answer to its
// Hello: the stream, or why it was refused.
func hello(ctx context.Context, r *coordtest.Replica, id, key string) (*simNode, error) {
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Hostname: "sim", Capacity: &podiumv1.Capacity{MaxTasks: 1}}}}); err != nil {
		return nil, err
	}
	if _, err := st.Receive(); err != nil {
		return nil, err
	}
	return &simNode{id: id, key: key, stream: st}, nil
}

// A replica holds one advisory lock per node in Postgres's lock table, which
// every query on the server shares. The benchmark at 34,000 nodes filled it
// and every query failed with "out of shared memory". A replica now holds at
// most half the table: the node past that is refused saying what to raise,
// the replica keeps working, and a node it holds still reconnects.
func TestReplicaHoldsNoMoreNodesThanTheLockTableAllows(t *testing.T) {
	t.Parallel()
	// 10 × (20 connections + 0 prepared) = 200 locks: 100 nodes.
	c := pgtest.NewCluster(t, "max_locks_per_transaction=10", "max_connections=20")
	db := pgtest.NewDatabaseIn(t, c)
	r := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var held []*simNode
	var refused error
	for range 150 {
		id, key := enroll(t, r)
		n, err := hello(ctx, r, id, key)
		if err != nil {
			refused = err
			break
		}
		held = append(held, n)
	}
	if len(held) != 100 {
		t.Fatalf("the replica took %d nodes (then: %v), want 100: half of a 200-lock table", len(held), refused)
	}
	if connect.CodeOf(refused) != connect.CodeResourceExhausted || !strings.Contains(refused.Error(), "max_locks_per_transaction") {
		t.Fatalf("node 101: %v, want ResourceExhausted naming max_locks_per_transaction", refused)
	}
	// The replica still works: a task is stored, and a node it held comes
	// back after its stream ends.
	if _, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}})); err != nil {
		t.Fatalf("submit once the replica is full of nodes: %v", err)
	}
	first := held[0]
	first.stream.CloseRequest()
	_ = first.stream.CloseResponse()
	var back error
	coordtest.Eventually(t, 30*time.Second, "a node the replica held to reconnect after its stream ended", func() bool {
		var n *simNode
		if n, back = hello(ctx, r, first.id, first.key); back == nil {
			held[0] = n
			return true
		}
		return false
	})
	for _, n := range held {
		n.stream.CloseRequest()
	}
}

// A lock that still does not fit (replicas share the table, and a replica
// may be told to hold any number) refuses the node naming the setting, not
// as Postgres's bare "out of shared memory".
func TestFullLockTableIsNamed(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t, "max_locks_per_transaction=10", "max_connections=20")
	db := pgtest.NewDatabaseIn(t, c)
	r := coordtest.Start(t, db.URL, coordtest.Options{Nodes: nodes.Config{MaxNodes: -1}})
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	// Enrolled first: once the table is full, any statement on the server may
	// be the one that fails, an enrollment as much as a Hello.
	type cred struct{ id, key string }
	creds := make([]cred, 2000)
	for i := range creds {
		creds[i].id, creds[i].key = enroll(t, r)
	}
	var held []*simNode
	defer func() {
		for _, n := range held {
			n.stream.CloseRequest()
		}
	}()
	for _, c := range creds {
		n, err := hello(ctx, r, c.id, c.key)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "max_locks_per_transaction") {
				t.Fatalf("node %d past a full lock table: %v, want ResourceExhausted naming max_locks_per_transaction", len(held)+1, err)
			}
			t.Logf("the 200-lock table took %d nodes", len(held))
			return
		}
		held = append(held, n)
	}
	t.Fatalf("2,000 nodes fit in a 200-lock table; the test no longer fills it")
}
