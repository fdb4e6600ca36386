package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// giveBack is the QUEUED status an agent sends for an assignment it has no
// slot for (agent/session.RejectReasonNoSlot).
func giveBack(task string, attempt int32, seq uint64) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: attempt, Seq: seq,
		Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
			State: podiumv1.TaskState_TASK_STATE_QUEUED, Reason: "node has no free slot"}}}
}

// attemptRows counts a task's rows in podium.attempts.
func attemptRows(t *testing.T, ctx context.Context, dbURL, task string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from podium.attempts where task_id = $1", task).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// receiveHeartbeating reads n's stream in the background and heartbeats
// every 100 ms with running as its count of attempts holding a slot, as an
// agent does; the function it returns waits for the next assignment.
func receiveHeartbeating(t *testing.T, ctx context.Context, n *simNode, running int32) func() *podiumv1.Assign {
	t.Helper()
	assigns := make(chan *podiumv1.Assign, 16)
	errc := make(chan error, 1)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		for {
			m, err := n.stream.Receive()
			if err != nil {
				errc <- err
				return
			}
			if a := m.GetAssign(); a != nil {
				assigns <- a
			}
		}
	}()
	go func() {
		defer close(stopped)
		for {
			_ = n.stream.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
				Capacity: &podiumv1.Capacity{MaxTasks: 1}, RunningTasks: running}}})
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return func() *podiumv1.Assign {
		t.Helper()
		select {
		case a := <-assigns:
			return a
		case err := <-errc:
			t.Fatalf("waiting for an assignment: %v", err)
		case <-ctx.Done():
			t.Fatal("waiting for an assignment: the test's time ran out")
		}
		return nil
	}
}

// A node that gives an assignment back ("no free slot") never ran it: the
// task is offered again under the same attempt number, without a new row in
// podium.attempts, so however often that happens the task keeps every attempt
// its spec allows. The node numbers its events of the attempt on from what
// the coordinator stored, which the assignment says.
func TestGivenBackAssignmentIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2, RetryOnNodeLoss: true})
	seqs := map[int32]uint64{} // the node's last seq of each attempt, as an agent keeps it
	// Its slot is free again after each give-back, and its heartbeats say so.
	next := receiveHeartbeating(t, ctx, node, 0)
	const givenBack = 5
	for i := range givenBack {
		a := next()
		if a.Attempt != 1 {
			t.Fatalf("assignment %d, after %d give-backs, is attempt %d of 2; a given-back assignment is not an attempt", i+1, i, a.Attempt)
		}
		if a.AckedSeq != seqs[a.Attempt] {
			t.Fatalf("assignment %d says %d events of the attempt are stored; the node gave it back %d times, one event each", i+1, a.AckedSeq, i)
		}
		seqs[a.Attempt]++
		node.send(t, giveBack(task, a.Attempt, seqs[a.Attempt]))
	}
	a := next()
	if a.Attempt != 1 {
		t.Fatalf("the assignment the node takes is attempt %d, want 1", a.Attempt)
	}
	zero := int32(0)
	last := seqs[a.Attempt]
	node.send(t, status(task, a.Attempt, last+1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		status(task, a.Attempt, last+2, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	if tk.Attempt != 1 {
		t.Fatalf("the task succeeded as attempt %d, want 1", tk.Attempt)
	}
	if n := attemptRows(t, ctx, db.URL, task); n != 1 {
		t.Fatalf("podium.attempts holds %d rows for the task, want 1: give-backs are not attempts", n)
	}
}

// After a partition long enough for its node to be declared offline, a task
// with retry_on_node_loss is requeued while the node still tears down its
// first attempt. The node returns either still running it (it lists the
// attempt in its Hello and is told to stop it) or having fenced it itself
// (it leaves the attempt out and counts it as stopping). Either way, until
// its own report says the teardown ended the scheduler counts the slot as
// taken: the task waits for the slot instead of bouncing off the node
// ("no free slot") and running past max_attempts. It then runs as attempt 2
// of 2, with two rows in podium.attempts.
func TestRequeuedTaskWaitsForTheReturningNodesTeardown(t *testing.T) {
	t.Parallel()
	t.Run("running", func(t *testing.T) { t.Parallel(); requeuedTaskWaitsForTeardown(t, false) })
	t.Run("fenced", func(t *testing.T) { t.Parallel(); requeuedTaskWaitsForTeardown(t, true) })
}

// requeuedTaskWaitsForTeardown is one case of
// TestRequeuedTaskWaitsForTheReturningNodesTeardown: fenced says the node
// stopped the attempt itself and reports it as stopping.
func requeuedTaskWaitsForTeardown(t *testing.T, fenced bool) {
	db := pgtest.NewDatabase(t)
	wd := watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: time.Second, OfflineAfter: 2 * time.Second}
	r := coordtest.Start(t, db.URL, coordtest.Options{Watchdog: wd, Nodes: nodes.Config{HeartbeatInterval: 500 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2, RetryOnNodeLoss: true})
	a := assignOf(t, node)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	// The partition: the node falls silent until it is offline and its task
	// is requeued.
	coordtest.Eventually(t, 20*time.Second, "the silent node's task to be requeued", func() bool {
		return getTask(t, ctx, r, task).State == podiumv1.TaskState_TASK_STATE_QUEUED
	})
	cancelStream(node)

	// The node returns, still tearing attempt 1 down.
	hello := &podiumv1.Hello{NodeId: id, NodeKey: key, Capacity: &podiumv1.Capacity{MaxTasks: 1}}
	if fenced {
		hello.Stopping = 1
	} else {
		hello.Running = []*podiumv1.RunningTask{{TaskId: task, Attempt: a.Attempt, LastSeq: 1}}
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	switch {
	case err != nil || m.GetHelloAck() == nil:
		t.Fatalf("the returning node got no HelloAck: %v %v", m, err)
	case fenced && len(m.GetHelloAck().GetAdopt()) != 0:
		t.Fatalf("the node reported no running attempt, yet was sent adopt decisions: %v", m.GetHelloAck().GetAdopt())
	case !fenced && (len(m.GetHelloAck().GetAdopt()) != 1 || m.GetHelloAck().GetAdopt()[0].Keep):
		t.Fatalf("the returning node was not told to let its requeued attempt go: %v", m)
	}
	returned := &simNode{id: id, key: key, stream: st}
	heartbeat := func(running int32) {
		t.Helper()
		if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
			Capacity: &podiumv1.Capacity{MaxTasks: 1}, RunningTasks: running, FreeSlots: 1 - running}}}); err != nil {
			t.Fatal(err)
		}
	}
	// While it tears attempt 1 down it says so, and it gives back whatever
	// it is assigned meanwhile, as an agent does.
	type msg struct {
		m   *podiumv1.StreamResponse
		err error
	}
	msgs := make(chan msg, 64)
	go func() {
		for {
			m, err := st.Receive()
			msgs <- msg{m, err}
			if err != nil {
				return
			}
		}
	}()
	heartbeat(1)
	seqs := map[int32]uint64{}
	gaveBack := 0
	waiting := false
	for !waiting {
		select {
		case got := <-msgs:
			if got.err != nil {
				t.Fatalf("the stream ended while the node tore down: %v", got.err)
			}
			if as := got.m.GetAssign(); as != nil {
				gaveBack++
				seqs[as.Attempt]++
				returned.send(t, giveBack(task, as.Attempt, seqs[as.Attempt]))
			}
		case <-time.After(100 * time.Millisecond):
			heartbeat(1)
			tk := getTask(t, ctx, r, task)
			if tk.Attempt > 2 {
				t.Fatalf("the task reached attempt %d of 2 while its node tore down (%d assignments given back)", tk.Attempt, gaveBack)
			}
			waiting = tk.State == podiumv1.TaskState_TASK_STATE_QUEUED && strings.Contains(tk.Reason, "waits for a free slot")
		case <-ctx.Done():
			t.Fatalf("the task never waited for the tearing-down node's slot (%d assignments given back)", gaveBack)
		}
	}
	if gaveBack != 0 {
		t.Fatalf("the scheduler assigned the task %d times to a node whose only slot was still tearing down", gaveBack)
	}
	// The teardown ends; the node says so (and goes on heartbeating), and
	// takes the task.
	heartbeat(0)
	var as *podiumv1.Assign
	for as == nil {
		select {
		case got := <-msgs:
			if got.err != nil {
				t.Fatalf("waiting for the assignment: %v", got.err)
			}
			as = got.m.GetAssign()
		case <-time.After(100 * time.Millisecond):
			heartbeat(0)
		case <-ctx.Done():
			t.Fatal("the task was never assigned once the node's slot was free")
		}
	}
	if as.Attempt != 2 {
		t.Fatalf("the requeued task runs as attempt %d, want 2 of 2", as.Attempt)
	}
	zero := int32(0)
	returned.send(t, status(task, 2, as.AckedSeq+1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		status(task, 2, as.AckedSeq+2, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	if tk.Attempt != 2 {
		t.Fatalf("the task succeeded as attempt %d, want 2", tk.Attempt)
	}
	if n := attemptRows(t, ctx, db.URL, task); n != 2 {
		t.Fatalf("podium.attempts holds %d rows for the task, want 2", n)
	}
}
