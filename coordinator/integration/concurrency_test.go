package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func keyed(onConflict string) *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{Image: "busybox",
		Concurrency: &podiumv1.Concurrency{Key: "deploy-prod", Limit: 1, OnConflict: onConflict}}
}

// cancelOf reads a node's stream up to the next cancel command.
func cancelOf(t *testing.T, n *simNode) *podiumv1.Cancel {
	t.Helper()
	for {
		m, err := n.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for a cancel: %v", err)
		}
		if c := m.GetCancel(); c != nil {
			return c
		}
	}
}

// With on_conflict queue, a second task of a key at its limit waits, saying
// which task holds the key, while other work still starts beside it; it
// starts when the first ends.
func TestConcurrencyKeyQueueWaitsForTheRunningTask(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})

	first := submit(t, ctx, r, keyed("queue"))
	if a := assignOf(t, node); a.TaskId != first {
		t.Fatalf("assigned %s, want %s", a.TaskId, first)
	}
	node.send(t, status(first, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	second := submit(t, ctx, r, keyed("queue"))
	waitReason(t, ctx, r, second, "concurrency key deploy-prod is at its limit (1 running: "+first+")")
	other := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	if a := assignOf(t, node); a.TaskId != other {
		t.Fatalf("assigned %s, want the task without a key, %s", a.TaskId, other)
	}

	zero := int32(0)
	node.send(t, status(first, 1, 2, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	if a := assignOf(t, node); a.TaskId != second {
		t.Fatalf("assigned %s once %s ended, want %s", a.TaskId, first, second)
	}
}

// With on_conflict cancel_newer, a task submitted while its key is at its
// limit is cancelled at once, never run, its reason naming the task that
// holds the key.
func TestConcurrencyKeyCancelNewerCancelsTheNewTaskAtSubmit(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})

	first := submit(t, ctx, r, keyed("cancel_newer"))
	if a := assignOf(t, node); a.TaskId != first {
		t.Fatalf("assigned %s, want %s", a.TaskId, first)
	}
	node.send(t, status(first, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, first, podiumv1.TaskState_TASK_STATE_RUNNING)
	res, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: keyed("cancel_newer")}))
	if err != nil {
		t.Fatal(err)
	}
	got := res.Msg.Task
	want := "on_conflict cancel_newer: concurrency key deploy-prod is at its limit (1 queued or running: " + first + ")"
	if got.State != podiumv1.TaskState_TASK_STATE_CANCELLED || !contains(got.Reason, want) {
		t.Fatalf("the newer task is %s, %q; want cancelled, saying %q", got.State, got.Reason, want)
	}
	if tk := getTask(t, ctx, r, first); tk.State != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("the running task is %s, want still running", tk.State)
	}
}

// With on_conflict cancel_older, a new task cancels the one holding the key,
// saying which task superseded it, and starts once that one has stopped:
// never beside it.
func TestConcurrencyKeyCancelOlderCancelsTheRunningTask(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4})

	first := submit(t, ctx, r, keyed("cancel_older"))
	if a := assignOf(t, node); a.TaskId != first {
		t.Fatalf("assigned %s, want %s", a.TaskId, first)
	}
	node.send(t, status(first, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	newer := submit(t, ctx, r, keyed("cancel_older"))
	c := cancelOf(t, node)
	want := "superseded by " + newer + " (concurrency key deploy-prod, on_conflict cancel_older)"
	if c.TaskId != first || c.Reason != want {
		t.Fatalf("cancel of %s, %q; want %s, %q", c.TaskId, c.Reason, first, want)
	}
	waitReason(t, ctx, r, newer, "concurrency key deploy-prod is at its limit (1 running: "+first+")")

	// A third while the first is still stopping cancels the second, queued,
	// at once; the first, already being cancelled, is left to stop.
	newest := submit(t, ctx, r, keyed("cancel_older"))
	tk := getTask(t, ctx, r, newer)
	if want := "superseded by " + newest; tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED || !contains(tk.Reason, want) {
		t.Fatalf("the queued older task is %s, %q; want cancelled, saying %q", tk.State, tk.Reason, want)
	}

	node.send(t, status(first, 1, 2, podiumv1.TaskState_TASK_STATE_CANCELLED, nil))
	if a := assignOf(t, node); a.TaskId != newest {
		t.Fatalf("assigned %s once %s stopped, want %s", a.TaskId, first, newest)
	}
	if tk := getTask(t, ctx, r, first); tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("the older task is %s, want cancelled", tk.State)
	}
}

// connectReporting opens a node's stream to r reporting the tasks it runs,
// as an agent does when it reconnects to another replica.
func connectReporting(t *testing.T, ctx context.Context, r *coordtest.Replica, id, key string, running ...string) *simNode {
	t.Helper()
	hello := &podiumv1.Hello{NodeId: id, NodeKey: key, Capacity: &podiumv1.Capacity{MaxTasks: 4}}
	for _, task := range running {
		hello.Running = append(hello.Running, &podiumv1.RunningTask{TaskId: task, Attempt: 1})
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	return &simNode{id: id, key: key, stream: st}
}

// The limit is the database's, not a leader's: as leadership moves from
// replica to replica, each new leader's passes still leave the waiting task
// of a key at its limit queued, while they place other work.
func TestConcurrencyLimitHoldsAcrossLeaderChanges(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	replicas := []*coordtest.Replica{coordtest.Start(t, db.URL, coordtest.Options{}), coordtest.Start(t, db.URL, coordtest.Options{})}
	leading := func() *coordtest.Replica {
		var l *coordtest.Replica
		wait.For(t, 20*time.Second, "one replica to lead", func() bool {
			l = nil
			n := 0
			for _, r := range replicas {
				if r.Leading() {
					l, n = r, n+1
				}
			}
			return n == 1
		})
		return l
	}
	standby := func(l *coordtest.Replica) *coordtest.Replica {
		for _, r := range replicas {
			if r != l {
				return r
			}
		}
		return nil
	}
	l := leading()
	s := standby(l)
	id, key := enroll(t, s)
	node := connectReporting(t, ctx, s, id, key)
	first := submit(t, ctx, s, keyed("queue"))
	if a := assignOf(t, node); a.TaskId != first {
		t.Fatalf("assigned %s, want %s", a.TaskId, first)
	}
	node.send(t, status(first, 1, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	second := submit(t, ctx, s, keyed("queue"))
	reason := "concurrency key deploy-prod is at its limit (1 running: " + first + ")"
	waitReason(t, ctx, s, second, reason)

	running, on := []string{first}, s
	for change := 1; change <= 2; change++ {
		// The leader stops and a new replica joins; whichever of the two
		// left leads.
		l.Stop()
		replicas = []*coordtest.Replica{s, coordtest.Start(t, db.URL, coordtest.Options{})}
		l = leading()
		s = standby(l)
		// The new leader's passes, which know nothing of the old one's,
		// leave a keyed task submitted now waiting, naming the task the old
		// leader placed, while they place a task without a key.
		waiter := submit(t, ctx, l, keyed("queue"))
		probe := submit(t, ctx, l, &podiumv1.TaskSpec{Image: "busybox"})
		if a := assignOf(t, node); a.TaskId != probe {
			t.Fatalf("leader change %d: assigned %s, want the task without a key, %s", change, a.TaskId, probe)
		}
		running = append(running, probe)
		waitReason(t, ctx, l, waiter, reason)
		for _, id := range []string{second, waiter} {
			if tk := getTask(t, ctx, l, id); tk.State != podiumv1.TaskState_TASK_STATE_QUEUED || tk.Reason != reason {
				t.Fatalf("leader change %d: %s is %s, %q; want queued, %q", change, id, tk.State, tk.Reason, reason)
			}
		}
		// The node stays on the standby, so that stopping the leader next
		// does not take its stream, as an agent moves when its replica goes.
		if on != s {
			node, on = connectReporting(t, ctx, s, id, key, running...), s
		}
	}
	zero := int32(0)
	node.send(t, status(first, 1, 2, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	if a := assignOf(t, node); a.TaskId != second {
		t.Fatalf("assigned %s once %s ended, want %s", a.TaskId, first, second)
	}
}

// A bad concurrency block is refused naming the field, and nothing is stored.
func TestConcurrencyBadKeyIsRefusedAndNothingStored(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := keyed("cancel_older")
	spec.Concurrency.Key = "deploy prod"
	_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !contains(err.Error(), "spec.concurrency.key") {
		t.Fatalf("submit with key %q: %v, want invalid argument naming spec.concurrency.key", spec.Concurrency.Key, err)
	}
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil || len(list.Msg.Tasks) != 0 {
		t.Fatalf("tasks after a refused submit: %v, %v; want none", list, err)
	}
}
