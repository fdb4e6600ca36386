package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/internal/testenv/coordtest"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// One replica leads; when its lease goes, a standby takes over: it schedules,
// and its watchdog notices a node that stopped heartbeating.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	opts := coordtest.Options{
		Nodes:    nodes.Config{HeartbeatInterval: time.Hour},
		Watchdog: nodes.Watchdog{Interval: 100 * time.Millisecond, UnreachableAfter: time.Second, OfflineAfter: 2 * time.Second},
	}
	a := coordtest.Start(t, db.URL, opts)
	b := coordtest.Start(t, db.URL, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coordtest.Eventually(t, 10*time.Second, "a leader", func() bool { return a.Leading() || b.Leading() })
	if a.Leading() && b.Leading() {
		t.Fatal("two leaders at once")
	}
	leader, standby := a, b
	if b.Leading() {
		leader, standby = b, a
	}
	l, err := leader.Leases().Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killBackend(t, ctx, db.URL, l.PID())
	coordtest.Eventually(t, 10*time.Second, "the standby to lead", func() bool { return standby.Leading() })

	// The new leader schedules: a node on the standby gets a task submitted there.
	id, key := enroll(t, standby)
	node, _ := connectNode(t, ctx, standby, id, key)
	taskID := submit(t, ctx, standby, &podiumv1.TaskSpec{Image: "busybox"})
	a1 := assignOf(t, node)
	if a1.TaskId != taskID {
		t.Fatalf("assigned %s, want %s", a1.TaskId, taskID)
	}
	node.send(t, status(taskID, a1.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	// And its watchdog runs: the silent node goes offline and its task is lost.
	coordtest.Eventually(t, 15*time.Second, "the task to be lost", func() bool {
		res, err := standby.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
		return err == nil && res.Msg.Task.State == podiumv1.TaskState_TASK_STATE_LOST
	})
}
