package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A node that stops heartbeating (its connection wedged open, so it keeps its
// session) becomes unreachable, then offline; then its task that may be retried
// goes back to the queue and the other is lost, each with a line in its log.
func TestWatchdogNodeLossPolicy(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Nodes:    nodes.Config{HeartbeatInterval: 500 * time.Millisecond}, // told in HelloAck; the sim node never beats
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: time.Second, OfflineAfter: 2 * time.Second},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)

	submit := func(retry bool) string {
		res, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{
			Image: "busybox", RetryOnNodeLoss: retry, MaxAttempts: 3}}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Task.Id
	}
	retried, lost := submit(true), submit(false)
	for assigned := 0; assigned < 2; {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for both assignments (%d so far): %v", assigned, err)
		}
		a := m.GetAssign()
		if a == nil {
			continue // the ack of the first task's event can come before the second assignment
		}
		assigned++
		node.send(t, status(a.TaskId, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	}
	nodeStatus := func() podiumv1.NodeStatus {
		res, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Nodes[0].Status
	}
	coordtest.Eventually(t, 10*time.Second, "the node to become unreachable", func() bool {
		return nodeStatus() == podiumv1.NodeStatus_NODE_STATUS_UNREACHABLE
	})
	get := func(id string) *podiumv1.Task {
		res, err := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Task
	}
	if s := get(retried).State; s != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("an unreachable node's task is %v; it should keep running", s)
	}
	coordtest.Eventually(t, 10*time.Second, "the node to go offline", func() bool {
		return nodeStatus() == podiumv1.NodeStatus_NODE_STATUS_OFFLINE
	})
	coordtest.Eventually(t, 10*time.Second, "the tasks to go through the node-loss policy", func() bool {
		return get(lost).State == podiumv1.TaskState_TASK_STATE_LOST && get(retried).State != podiumv1.TaskState_TASK_STATE_RUNNING
	})
	if tk := get(retried); tk.State != podiumv1.TaskState_TASK_STATE_QUEUED && tk.State != podiumv1.TaskState_TASK_STATE_SCHEDULED {
		t.Fatalf("the retry_on_node_loss task is %v, want it requeued", tk.State)
	}
	for _, id := range []string{retried, lost} {
		if !logHas(t, ctx, r, id, "went offline") {
			t.Fatalf("task %s's log does not say its node went offline", id)
		}
	}
}

func logHas(t *testing.T, ctx context.Context, r *coordtest.Replica, id, text string) bool {
	t.Helper()
	ev, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for ev.Receive() {
		if n := ev.Msg().GetEvent().GetNote(); n != nil && strings.Contains(n.Text, text) {
			found = true
		}
	}
	return found
}
