package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// simNode is a node that speaks the real protocol without running anything.
type simNode struct {
	id, key string
	stream  *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]
}

func enroll(t *testing.T, r *coordtest.Replica, labels ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: labels}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.Token, Hostname: "sim"}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.NodeId, res.Msg.NodeKey
}

func connectNode(t *testing.T, ctx context.Context, r *coordtest.Replica, id, key string) (*simNode, *podiumv1.HelloAck) {
	t.Helper()
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Hostname: "sim", Capacity: &podiumv1.Capacity{MaxTasks: 2}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("hello: %v", err)
	}
	if m.GetHelloAck() == nil {
		t.Fatalf("first reply is %v, want a HelloAck", m)
	}
	return &simNode{id: id, key: key, stream: st}, m.GetHelloAck()
}

func (n *simNode) send(t *testing.T, evs ...*podiumv1.TaskEvent) {
	t.Helper()
	if err := n.stream.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{Events: &podiumv1.EventBatch{Events: evs}}}); err != nil {
		t.Fatal(err)
	}
}

func status(task string, attempt int32, seq uint64, st podiumv1.TaskState, exit *int32) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: attempt, Seq: seq,
		Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: st, ExitCode: exit}}}
}

func logEv(task string, attempt int32, seq, off uint64, stream podiumv1.LogStream, data string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: attempt, Seq: seq,
		Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: stream, Offset: off, Data: []byte(data)}}}
}

// A submitted task reaches a connected node as an Assign; the node's events are
// stored once each even when re-sent, acked, and a follower sees the output and
// the final state.
func TestSubmitAssignEventsFollow(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)

	sub, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{
		Image: "busybox", Command: []string{"sh", "-c", "echo hi"}, Env: map[string]string{"SECRET": "x"}}}))
	if err != nil {
		t.Fatal(err)
	}
	taskID := sub.Msg.Task.Id
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil || len(list.Msg.Tasks) != 1 || list.Msg.Tasks[0].Id != taskID {
		t.Fatalf("List with no filter: %v, %v; want the submitted task", list, err)
	}
	m, err := node.stream.Receive()
	if err != nil {
		t.Fatalf("waiting for the assignment: %v", err)
	}
	a := m.GetAssign()
	if a == nil || a.TaskId != taskID || a.Attempt != 1 || a.Spec.GetEnv()["SECRET"] != "x" {
		t.Fatalf("got %v, want the assignment of %s attempt 1 with its env", m, taskID)
	}
	zero := int32(0)
	batch := []*podiumv1.TaskEvent{
		status(taskID, 1, 1, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil),
		status(taskID, 1, 2, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		logEv(taskID, 1, 3, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, "hi\n"),
	}
	node.send(t, batch...)
	node.send(t, batch...) // a replay after a reconnect stores nothing twice
	node.send(t, logEv(taskID, 1, 4, 0, podiumv1.LogStream_LOG_STREAM_STDERR, "warn\n"),
		status(taskID, 1, 5, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	var acked uint64
	for acked < 5 {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for the ack of seq 5 (acked %d): %v", acked, err)
		}
		if a := m.GetAck(); a != nil {
			if a.AckedSeq < acked {
				t.Fatalf("ack went backwards: %d after %d", a.AckedSeq, acked)
			}
			acked = a.AckedSeq
		}
	}
	ev, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: taskID, Follow: true}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr string
	var final *podiumv1.Task
	for ev.Receive() {
		msg := ev.Msg()
		if l := msg.GetEvent().GetLog(); l != nil {
			if l.Stream == podiumv1.LogStream_LOG_STREAM_STDOUT {
				stdout += string(l.Data)
			} else {
				stderr += string(l.Data)
			}
		}
		if msg.Task != nil {
			final = msg.Task
		}
	}
	if err := ev.Err(); err != nil {
		t.Fatal(err)
	}
	if stdout != "hi\n" || stderr != "warn\n" {
		t.Fatalf("stdout %q stderr %q, want each once", stdout, stderr)
	}
	if final == nil || final.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || final.GetExitCode() != 0 {
		t.Fatalf("final task %v, want succeeded with exit 0", final)
	}
	// A late status after the end is a rejected no-op.
	one := int32(1)
	node.send(t, status(taskID, 1, 6, podiumv1.TaskState_TASK_STATE_FAILED, &one))
	coordtest.Eventually(t, 5*time.Second, "the late event to be ingested", func() bool {
		got, err := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
		return err == nil && got.Msg.Task.LastSeq > final.LastSeq
	})
	got, _ := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
	if got.Msg.Task.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("a late failed moved the task to %v", got.Msg.Task.State)
	}
}

// A wrong API token, a spec without an image and a wrong node key are each
// refused with the code and field a caller can act on, and change nothing.
func TestBadCallsAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Wrong API token.
	bad := podiumv1connectTasksWithToken(r, "wrong")
	_, err := bad.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "x"}}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong token: got %v, want Unauthenticated", err)
	}
	// No image.
	_, err = r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("no image: got %v, want InvalidArgument", err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || !contains(ce.Message(), "image") {
		t.Fatalf("no image: message %q does not name the field", err)
	}
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.Tasks) != 0 {
		t.Fatalf("refused submits stored %d tasks", len(list.Msg.Tasks))
	}
	// Wrong node key.
	id, _ := enroll(t, r)
	st := r.NodeClient().Stream(ctx)
	_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{NodeId: id, NodeKey: "podium_nk_wrong"}}})
	_, err = st.Receive()
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong node key: got %v, want Unauthenticated", err)
	}
	nodes, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := nodes.Msg.Nodes[0]; n.Status != podiumv1.NodeStatus_NODE_STATUS_OFFLINE || n.Replica != "" {
		t.Fatalf("a refused stream changed the node: %v", n)
	}
}
