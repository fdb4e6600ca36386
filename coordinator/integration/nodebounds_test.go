package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A node is held to bounds on what it says about itself: an Enroll or Hello
// past them is refused with the field named, and nothing of it is stored (the
// token still works, the node keeps its hostname).
func TestNodeInfoIsBounded(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("h", 256)
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: long}))
	wantRefused(t, "Enroll with a 256-byte hostname", err, "hostname: 256 bytes, more than 255")
	_, err = r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "sim", AgentVersion: long}))
	wantRefused(t, "Enroll with a 256-byte agent version", err, "agent_version: 256 bytes")
	res, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "sim"}))
	if err != nil {
		t.Fatalf("the token was used up by refused enrollments: %v", err)
	}
	id, key := res.Msg.NodeId, res.Msg.NodeKey

	for _, c := range []struct {
		hello *podiumv1.Hello
		want  string
	}{
		{&podiumv1.Hello{NodeId: id, NodeKey: key, Hostname: long}, "more than 255"},
		{&podiumv1.Hello{NodeId: id, NodeKey: key, Hostname: "sim", AgentVersion: long}, "more than 255"},
		// Stopping slots are counted busy: a node may not claim more than
		// it could report running, nor fewer than none.
		{&podiumv1.Hello{NodeId: id, NodeKey: key, Hostname: "sim", Stopping: 1001}, "stopping: 1001 slots, want 0 to 1000"},
		{&podiumv1.Hello{NodeId: id, NodeKey: key, Hostname: "sim", Stopping: -1}, "stopping: -1 slots, want 0 to 1000"},
	} {
		st := r.NodeClient().Stream(ctx)
		_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: c.hello}})
		_, err := st.Receive()
		wantRefused(t, "Hello past the bounds", err, c.want)
		_ = st.CloseRequest()
		_ = st.CloseResponse()
	}
	nodes, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Msg.Nodes) != 1 || nodes.Msg.Nodes[0].Hostname != "sim" || nodes.Msg.Nodes[0].Replica != "" {
		t.Fatalf("after refused Hellos the nodes are %v, want the one enrolled, as it was, with no session", nodes.Msg.Nodes)
	}
}

// A node that sends a log chunk over 64 KiB, or more than 1,000 events in a
// message, is disconnected with the reason (which the agent logs when its
// stream ends), the replica logs it naming the node, and nothing of that
// message is stored.
func TestNodePastEventBoundsIsDisconnected(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var log logBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	taskID := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	node, _ := connectNode(t, ctx, r, id, key)
	a := assignOf(t, node)
	if a.TaskId != taskID {
		t.Fatalf("assigned %s, want %s", a.TaskId, taskID)
	}
	// What an agent sends is within the bounds; the stream stays up.
	node.send(t, status(taskID, 1, 1, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil),
		status(taskID, 1, 2, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		logEv(taskID, 1, 3, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, strings.Repeat("x", 64<<10)))
	waitAcked(t, node, 3)
	stored := getTask(t, ctx, r, taskID).LastSeq

	node.send(t, logEv(taskID, 1, 4, 64<<10, podiumv1.LogStream_LOG_STREAM_STDOUT, strings.Repeat("y", 64<<10+1)))
	err := receiveUntilError(node)
	wantRefused(t, "a log chunk of 64 KiB + 1", err, "a log chunk of 65537 bytes, more than 65536")
	coordtest.Eventually(t, 10*time.Second, "the replica to log the disconnect", func() bool {
		return log.has("it broke the protocol's bounds") && log.has(id) && log.has("a log chunk of 65537 bytes")
	})

	// Back, reporting the task it runs, as an agent would.
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{NodeId: id, NodeKey: key,
		Hostname: "sim", Capacity: &podiumv1.Capacity{MaxTasks: 2},
		Running: []*podiumv1.RunningTask{{TaskId: taskID, Attempt: 1, LastSeq: 3}}}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Receive(); err != nil || m.GetHelloAck() == nil {
		t.Fatalf("hello again: %v, %v", m, err)
	}
	node = &simNode{id: id, key: key, stream: st}
	many := make([]*podiumv1.TaskEvent, 1001)
	for i := range many {
		many[i] = logEv(taskID, 1, uint64(4+i), uint64(64<<10+i), podiumv1.LogStream_LOG_STREAM_STDOUT, "z")
	}
	node.send(t, many...)
	err = receiveUntilError(node)
	wantRefused(t, "1001 events in one message", err, "1001 events in one message, more than 1000")

	got := getTask(t, ctx, r, taskID)
	if got.LastSeq != stored || got.State != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("the task is %v with its log at seq %d, want it running at seq %d: the refused messages changed it", got.State, got.LastSeq, stored)
	}
}

// waitAcked receives until the node's events are acked up to seq.
func waitAcked(t *testing.T, n *simNode, seq uint64) {
	t.Helper()
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for the ack of seq %d: %v", seq, err)
		}
		if a := m.GetAck(); a != nil && a.AckedSeq >= seq {
			return
		}
	}
}

// receiveUntilError reads the node's stream until the coordinator ends it.
func receiveUntilError(n *simNode) error {
	for {
		if _, err := n.stream.Receive(); err != nil {
			return err
		}
	}
}
