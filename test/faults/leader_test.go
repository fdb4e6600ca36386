package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// Leading reports whether the running replica process leads, as its log
// says (coordinator/leader logs each change of leadership): since it last
// started it logged "this replica is now the leader" and nothing after that
// says it stopped.
func (r *Replica) Leading() bool {
	l := r.Log()
	if i := strings.LastIndex(l, "=== harness: start replica"); i >= 0 {
		l = l[i:]
	}
	led := strings.LastIndex(l, "this replica is now the leader")
	if led < 0 {
		return false
	}
	for _, s := range []string{"no longer the leader", "steps down as leader", "hands leadership over"} {
		if strings.LastIndex(l, s) > led {
			return false
		}
	}
	return true
}

// leaderOf waits until exactly one of a and b leads and returns it first.
func leaderOf(t testing.TB, a, b *Replica) (leader, standby *Replica) {
	t.Helper()
	wait.For(t, readyWithin, "exactly one of replicas "+a.Addr+" and "+b.Addr+" to lead", func() bool {
		return a.Leading() != b.Leading()
	})
	if a.Leading() {
		return a, b
	}
	return b, a
}

// TestLeaderKilledWithTasksQueued SIGKILLs the leading replica (the one
// running the scheduler) while tasks wait in the queue for the node's one
// slot. The node's stream is on the standby, and every `podium run` was
// given the leader first: the standby must take the lead and schedule every
// queued task, each running once (attempt 1) to its own end, each follower
// failing over and exiting with its task's code, with its output byte-exact
// (stored output too).
func TestLeaderKilledWithTasksQueued(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	leader, standby := leaderOf(t, StartReplica(t, db.URL), StartReplica(t, db.URL))
	ag := EnrollAgent(t, standby, standby.URL())
	ag.Args = []string{"--max-tasks", "1"} // the last --max-tasks wins: one slot
	ag.Start()
	standby.WaitOnlineOn(t, ag.Node)

	const n = 4
	var ws [n]Workload
	var runs [n]*Run
	var ids [n]string
	for i := range n {
		ws[i] = Workload{Lines: 20, Every: 100 * time.Millisecond, Code: 10 + i}
		runs[i] = StartRun(t, []string{leader.URL(), standby.URL()}, ws[i].Args(t)...)
	}
	for i := range n {
		ids[i] = runs[i].TaskID(t)
	}
	// One task holds the slot; the others wait for it. Holding it is
	// being assigned, starting or running: on a loaded machine a task's
	// container takes seconds to start and its run is short, and a wait
	// for RUNNING alone could miss the whole window (after it the queue
	// is one shorter, for good).
	tasks := standby.Tasks()
	var states [n]podiumv1.TaskState
	wait.For(t, runWithin, "one task to hold the node's slot and the others to be queued", func() bool {
		holding, queued := 0, 0
		for i, id := range ids {
			res, err := tasks.Get(context.Background(), connect.NewRequest(&podiumv1.GetRequest{Id: id}))
			if err != nil {
				return false
			}
			states[i] = res.Msg.Task.State
			switch states[i] {
			case podiumv1.TaskState_TASK_STATE_SCHEDULED, podiumv1.TaskState_TASK_STATE_PROVISIONING, podiumv1.TaskState_TASK_STATE_RUNNING:
				holding++
			case podiumv1.TaskState_TASK_STATE_QUEUED:
				queued++
			}
		}
		return holding == 1 && queued == n-1
	})
	leader.Kill()
	killed := time.Now()
	t.Logf("leader %s SIGKILLed with the tasks %v", leader.Addr, states)
	wait.For(t, readyWithin, "the standby "+standby.Addr+" to lead", standby.Leading)
	t.Logf("the standby led %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	for i := range n {
		tk := ws[i].Check(t, standby, runs[i])
		checkEventsOnce(t, tasks, ids[i])
		if tk.Attempt != 1 || tk.NodeId != ag.Node {
			t.Errorf("task %s ran as attempt %d on node %q, want attempt 1 on %s", ids[i], tk.Attempt, tk.NodeId, ag.Node)
		}
	}
	NothingLeft(t, ag.Node)
}
