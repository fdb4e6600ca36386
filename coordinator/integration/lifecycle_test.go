package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/dispatch"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func connectWith(t *testing.T, ctx context.Context, r *coordtest.Replica, id, key string, capa *podiumv1.Capacity) *simNode {
	t.Helper()
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Capacity: capa}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	return &simNode{id: id, key: key, stream: st}
}

func getTask(t *testing.T, ctx context.Context, r *coordtest.Replica, id string) *podiumv1.Task {
	t.Helper()
	res, err := r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Task
}

func waitReason(t *testing.T, ctx context.Context, r *coordtest.Replica, id, want string) {
	t.Helper()
	coordtest.Eventually(t, 10*time.Second, "reason "+want, func() bool {
		tk := getTask(t, ctx, r, id)
		return tk.State == podiumv1.TaskState_TASK_STATE_QUEUED && strings.Contains(tk.Reason, want)
	})
}

func waitState(t *testing.T, ctx context.Context, r *coordtest.Replica, id string, want podiumv1.TaskState) *podiumv1.Task {
	t.Helper()
	var tk *podiumv1.Task
	coordtest.Eventually(t, 15*time.Second, "state "+want.String(), func() bool {
		tk = getTask(t, ctx, r, id)
		return tk.State == want
	})
	return tk
}

// Each reason a task waits for shows in its situation and clears with it;
// a task no node could ever run is unschedulable, one that waits is not.
func TestWhyQueued(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu"}, Resources: &podiumv1.Resources{Cpu: 1},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "busybox", Resources: &podiumv1.Resources{Cpu: 1.5}}}}
	task := submit(t, ctx, r, spec)
	waitReason(t, ctx, r, task, "no node is connected")
	unschedulable := func(want bool) {
		t.Helper()
		if tk := getTask(t, ctx, r, task); tk.GetUnschedulable() != want {
			t.Fatalf("reason %q: unschedulable %v, want %v", tk.GetReason(), tk.GetUnschedulable(), want)
		}
	}
	unschedulable(false)

	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{CpuCores: 2, MaxTasks: 1})
	waitReason(t, ctx, r, task, "cannot run on any node: no node has every label the task needs (gpu)")
	unschedulable(true)

	if _, err := r.Admin().SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id, Add: []string{"gpu"}})); err != nil {
		t.Fatal(err)
	}
	// 1 CPU for the task and 1.5 for its sidecar do not fit in 2, ever.
	waitReason(t, ctx, r, task, "cannot run on any node: it asks 2.5 CPU (its sidecars' included) and the largest node with the labels the task needs has 2 CPU")
	unschedulable(true)

	// A node big enough, its one slot and most of its CPU taken by another
	// task that goes first because of its priority: the task waits for room.
	other := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu"}, Priority: 10,
		Resources: &podiumv1.Resources{Cpu: 6}})
	id2, key2 := enroll(t, r, "gpu")
	node2 := connectWith(t, ctx, r, id2, key2, &podiumv1.Capacity{CpuCores: 8, MaxTasks: 1})
	a := assignOf(t, node2)
	if a.TaskId != other {
		t.Fatalf("assigned %s first, want the higher-priority %s", a.TaskId, other)
	}
	waitReason(t, ctx, r, task, "waiting: no node has 2.5 CPU free now")
	unschedulable(false)

	if _, err := r.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id2, Draining: true})); err != nil {
		t.Fatal(err)
	}
	waitReason(t, ctx, r, task, "every node that could run the task is draining")
	unschedulable(false)
	if _, err := r.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id2, Draining: false})); err != nil {
		t.Fatal(err)
	}
	waitReason(t, ctx, r, task, "waiting: no node has 2.5 CPU free now")

	// The slot and the room free: the task is placed and its reason clears.
	zero := int32(0)
	node2.send(t, status(other, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	a = assignOf(t, node2)
	if a.TaskId != task {
		t.Fatalf("got %s, want %s once the slot freed", a.TaskId, task)
	}
	if tk := getTask(t, ctx, r, task); tk.Reason != "" || tk.GetUnschedulable() {
		t.Fatalf("reason %q (unschedulable %v) did not clear once placed", tk.Reason, tk.GetUnschedulable())
	}
	_ = node
}

// An assignment not accepted in time is taken back: requeued while attempts
// remain, then failed saying why; the node is told to drop it.
func TestAckDeadline(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Dispatch: dispatch.Config{AckDeadline: time.Second, SweepInterval: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2})
	var attempts []int32
	var revoked int
	for revoked < 2 {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for two revoked assignments (attempts %v, %d revoked): %v", attempts, revoked, err)
		}
		if a := m.GetAssign(); a != nil {
			attempts = append(attempts, a.Attempt)
		}
		if c := m.GetCancel(); c != nil && strings.Contains(c.Reason, "did not accept") {
			revoked++
		}
	}
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts %v, want 1 then 2", attempts)
	}
	// The revoked assignments are no longer booked against the node's session.
	if snap, ok := r.Nodes().Registry().SnapshotOf(id); !ok || snap.RunningTasks != 0 || snap.FreeSlots != 1 {
		t.Errorf("session after both revocations: %+v (connected %v), want no task booked and its one slot free", snap, ok)
	}
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	if !strings.Contains(tk.Reason, "did not accept") || !strings.Contains(tk.Reason, "all 2 attempts") {
		t.Fatalf("reason %q", tk.Reason)
	}
}

// A task running past its timeout, on a node that does not stop it itself, is
// stopped by the control plane and ends failed: timeout.
func TestTimeoutBackstop(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Dispatch: dispatch.Config{TimeoutMargin: 100 * time.Millisecond, SweepInterval: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 1})
	a := assignOf(t, node)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	for {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for the control plane to cancel the task past its timeout: %v", err)
		}
		if c := m.GetCancel(); c != nil {
			if c.Reason != "timeout" {
				t.Fatalf("cancel reason %q, want timeout", c.Reason)
			}
			break
		}
	}
	node.send(t, status(task, a.Attempt, 2, podiumv1.TaskState_TASK_STATE_CANCELLED, nil))
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	if tk.Reason != "timeout" {
		t.Fatalf("reason %q, want timeout", tk.Reason)
	}
}

// Cancelling a queued task ends it without running; cancelling a task whose
// node has gone writes it off after the wait.
func TestCancelQueuedAndWriteOff(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Dispatch: dispatch.Config{WriteOffAfter: time.Second, SweepInterval: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queued := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	res, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: queued}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Task.State != podiumv1.TaskState_TASK_STATE_CANCELLED || res.Msg.Task.NodeId != "" {
		t.Fatalf("cancelled queued task: %v", res.Msg.Task)
	}
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	cancelStream(node) // the node goes away
	coordtest.Eventually(t, 10*time.Second, "the session to end", func() bool {
		ns, _ := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && ns.Msg.Nodes[0].Replica == ""
	})
	if _, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: task})); err != nil {
		t.Fatal(err)
	}
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_CANCELLED)
	if !strings.Contains(tk.Reason, "written off") {
		t.Fatalf("reason %q, want a write-off", tk.Reason)
	}
}

// The leader keeps the fleet in memory between passes; a drain committed
// before a submit must still be seen by the pass that places it, and an
// undrain, or a slot freed by a finished task, must be seen without waiting
// for the copy to age out. The copy's maximum age is set far beyond the
// test's own deadline, so a change the scheduler saw only by ageing it out
// would leave the task waiting and fail the test.
func TestSchedulerSeesFleetChangesAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Dispatch: dispatch.Config{FleetMaxAge: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	zero := int32(0)
	for i := range 5 {
		// Room: placed at once; then its finish frees the one slot.
		task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
		a := assignOf(t, node)
		if a.TaskId != task {
			t.Fatalf("round %d: assigned %s, want %s", i, a.TaskId, task)
		}
		node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
		waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_SUCCEEDED)

		// Drained, then a submit right after: it must wait, saying why.
		if _, err := r.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: true})); err != nil {
			t.Fatal(err)
		}
		waiting := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
		waitReason(t, ctx, r, waiting, "draining")
		// Undrained: the node gets the waiting task, long before the
		// leader's copy of the fleet would age out.
		if _, err := r.Admin().DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: false})); err != nil {
			t.Fatal(err)
		}
		a = assignOf(t, node)
		if a.TaskId != waiting {
			t.Fatalf("round %d: assigned %s after the undrain, want %s", i, a.TaskId, waiting)
		}
		node.send(t, status(waiting, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
		waitState(t, ctx, r, waiting, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	}
}
