package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A node that reports a task the control plane no longer holds on it is told
// not to keep it and to cancel it, with a reason an operator can read.
func TestReconcileCancelsWhatTheControlPlaneDoesNotHold(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	// A task that ran here once and was then cancelled while the node was away.
	node, _ := connectNode(t, ctx, r, id, key)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	cancelStream(node)
	coordtest.Eventually(t, 10*time.Second, "the session to end", func() bool {
		ns, _ := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && ns.Msg.Nodes[0].Replica == ""
	})
	if _, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: task})); err != nil {
		t.Fatal(err)
	}
	// The task is still held (cancel requested, not yet confirmed): kept.
	// Now make the control plane let go of it, as a write-off would.
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "update podium.tasks set state = 'cancelled', finished_at = now() where id = $1", task); err != nil {
		t.Fatal(err)
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Running: []*podiumv1.RunningTask{{TaskId: task, Attempt: a.Attempt, LastSeq: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	adopt := m.GetHelloAck().GetAdopt()
	if len(adopt) != 1 || adopt[0].Keep {
		t.Fatalf("adopt %v, want the task not kept", adopt)
	}
	for {
		m, err := st.Receive()
		if err != nil {
			t.Fatalf("waiting for the node to be told to cancel the task: %v", err)
		}
		if c := m.GetCancel(); c != nil && c.TaskId == task {
			if c.Reason != nodes.CancelReasonNotOurs {
				t.Fatalf("cancel reason %q, want %q", c.Reason, nodes.CancelReasonNotOurs)
			}
			return
		}
	}
}

// After every replica restarts, a node whose last heartbeat is long past gets
// the whole offline period to come back before anything is declared lost.
func TestGracePeriodAfterRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	wd := watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: 2 * time.Second, OfflineAfter: 4 * time.Second}
	r := coordtest.Start(t, db.URL, coordtest.Options{Watchdog: wd, Nodes: nodes.Config{HeartbeatInterval: 500 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	cancelStream(node)
	r.Stop()

	// The control plane was down for an hour.
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "update podium.nodes set last_heartbeat_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	r2 := coordtest.Start(t, db.URL, coordtest.Options{Watchdog: wd, Nodes: nodes.Config{HeartbeatInterval: 500 * time.Millisecond}})
	coordtest.Eventually(t, 10*time.Second, "a leader", r2.Leading)
	// Well inside the grace period the node is not offline and its task runs.
	// The sleep is the scenario: that nothing happens for a while can only be
	// seen by letting the while pass (the watchdog sweeps every 100 ms).
	time.Sleep(time.Second)
	if s := getTask(t, ctx, r2, task).State; s != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("the task is %v one second after the restart; the node should have its grace period", s)
	}
	// The node comes back in time: nothing is lost.
	st := r2.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Capacity: &podiumv1.Capacity{MaxTasks: 2},
		Running: []*podiumv1.RunningTask{{TaskId: task, Attempt: a.Attempt, LastSeq: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Receive(); err != nil || len(m.GetHelloAck().GetAdopt()) != 1 || !m.GetHelloAck().GetAdopt()[0].Keep {
		t.Fatalf("the returning node was not told to keep its task: %v %v", m, err)
	}
	// It heartbeats while it waits (the heartbeat interval is 10 s, so send one
	// now and then).
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{}}})
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	// The scenario again: past the point where the node would have gone
	// offline without its grace period, its task still runs.
	time.Sleep(wd.OfflineAfter + time.Second)
	if s := getTask(t, ctx, r2, task).State; s != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("the task is %v; its node came back within the grace period", s)
	}
}

// The admin views answer what operators ask.
func TestAdminViews(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r, "linux")
	connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 3})
	idle, _ := enroll(t, r)
	submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	waiting := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu"}, Priority: 7})
	waitReason(t, ctx, r, waiting, "(gpu)")

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var status, replica string
	var free, running int
	var secs int64
	var labels []string
	if err := conn.QueryRow(ctx, `select status, seconds_since_heartbeat, coalesce(session_replica, ''), free_slots,
			running_tasks, labels from podium.node_health where node = $1`, id).
		Scan(&status, &secs, &replica, &free, &running, &labels); err != nil {
		t.Fatal(err)
	}
	if status != "online" || secs > 5 || replica != r.ReplicaID() || running != 1 || free != 2 || len(labels) != 1 {
		t.Fatalf("node_health: status %s, %d s, replica %q, free %d, running %d, labels %v", status, secs, replica, free, running, labels)
	}
	if err := conn.QueryRow(ctx, "select status from podium.node_health where node = $1", idle).Scan(&status); err != nil || status != "offline" {
		t.Fatalf("a node that never connected: %q %v", status, err)
	}
	var task, why string
	var prio int
	if err := conn.QueryRow(ctx, "select task, priority, why from podium.task_queue").Scan(&task, &prio, &why); err != nil {
		t.Fatal(err)
	}
	if task != waiting || prio != 7 || why == "" {
		t.Fatalf("task_queue: %s priority %d why %q", task, prio, why)
	}
}
