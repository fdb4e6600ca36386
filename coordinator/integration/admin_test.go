package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func nextConfig(t *testing.T, n *simNode) *podiumv1.NodeConfig {
	t.Helper()
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for node settings: %v", err)
		}
		if c := m.GetConfig(); c != nil {
			return c
		}
	}
}

// Drain, slots and labels reach a connected node at once (the live half) from
// whichever replica holds it, and a node that was offline finds them in its
// HelloAck (the durable half). rm is refused while the node is online and not
// drained.
func TestNodeSettingsLiveAndDurable(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{})
	b := coordtest.Start(t, db.URL, coordtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, a, "linux")
	node, _ := connectNode(t, ctx, b, id, key)

	if _, err := a.Admin().RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: id})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("rm of an online undrained node: %v, want FailedPrecondition", err)
	}
	if _, err := a.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: true})); err != nil {
		t.Fatal(err)
	}
	if c := nextConfig(t, node); !c.Draining {
		t.Fatalf("live config %v, want draining", c)
	}
	if _, err := a.Admin().SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: id, MaxTasks: 7})); err != nil {
		t.Fatal(err)
	}
	if c := nextConfig(t, node); c.MaxTasksOverride != 7 {
		t.Fatalf("live config %v, want 7 slots", c)
	}
	res, err := a.Admin().SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id, Add: []string{"gpu"}, Remove: []string{"linux"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.Node.Labels; len(got) != 1 || got[0] != "gpu" {
		t.Fatalf("labels %v, want [gpu]", got)
	}
	if c := nextConfig(t, node); len(c.Labels) != 1 || c.Labels[0] != "gpu" {
		t.Fatalf("live config %v, want labels [gpu]", c)
	}
	// Bad input changes nothing.
	if _, err := a.Admin().SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: id, MaxTasks: -1})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("negative slots: %v", err)
	}
	if _, err := a.Admin().SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id, Add: []string{"bad label!"}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad label: %v", err)
	}
	if _, err := a.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: "node_nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown node: %v", err)
	}
	// Offline: the node goes away, the operator undrains, the node comes back and
	// reads it from its HelloAck.
	cancelStream(node)
	coordtest.Eventually(t, 10*time.Second, "the session to end", func() bool {
		ns, _ := a.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && ns.Msg.Nodes[0].Replica == ""
	})
	if _, err := a.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: false})); err != nil {
		t.Fatal(err)
	}
	_, ack := connectNode(t, ctx, a, id, key)
	if ack.Draining || ack.MaxTasksOverride != 7 || len(ack.Labels) != 1 || ack.Labels[0] != "gpu" {
		t.Fatalf("HelloAck %v does not carry the stored settings", ack)
	}
}

func cancelStream(n *simNode) {
	_ = n.stream.CloseRequest()
	_ = n.stream.CloseResponse()
}

// Messages sent to a running task reach its node in order, and a task that is
// not on a node cannot take one.
func TestInjectReachesNodeInOrder(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	taskID := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	node.send(t, status(taskID, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	for _, text := range []string{"first", "second"} {
		if _, err := r.Tasks().Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: taskID, Text: text})); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var lastID int64
	for len(got) < 2 {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for the injected messages (got %q): %v", got, err)
		}
		if in := m.GetInject(); in != nil {
			if in.MessageId <= lastID {
				t.Fatalf("message ids not increasing: %d after %d", in.MessageId, lastID)
			}
			lastID = in.MessageId
			got = append(got, in.Text)
		}
	}
	if got[0] != "first" || got[1] != "second" {
		t.Fatalf("messages arrived as %v", got)
	}
	if _, err := r.Tasks().Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: taskID})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("empty message: %v", err)
	}
	queued := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"nowhere"}})
	if _, err := r.Tasks().Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: queued, Text: "hi"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("message to a queued task: %v, want FailedPrecondition", err)
	}
}
