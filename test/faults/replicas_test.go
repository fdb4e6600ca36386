package faults

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/identity"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// waitKept waits until the agent keeps r in the replica list in its data
// directory (replicas.json): what it will dial once every replica it
// reached before is gone, even after a restart.
func waitKept(t testing.TB, a *Agent, r *Replica) {
	t.Helper()
	wait.For(t, nodeWithin, "the agent to keep replica "+r.Addr+" in its data directory", func() bool {
		kept, err := identity.LoadReplicas(a.DataDir)
		return err == nil && slices.ContainsFunc(kept, func(u string) bool { return strings.Contains(u, r.Addr) })
	})
}

// TestReplicaHoldingNodeStreamKilled SIGKILLs the replica that holds the
// node's stream and serves the follower, mid-task, with a second replica
// up. The agent was enrolled with the killed replica only, so it can reach
// the other only through the replica list HelloAck gave it: the node must be
// online on the other replica without anyone doing anything, the task must
// run on as attempt 1 (adopted, not lost), and `podium run`, given both
// addresses, must fail over and exit with the task's code, having printed
// the task's output byte-exact (stored output too).
func TestReplicaHoldingNodeStreamKilled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	a := StartReplica(t, db.URL)
	b := StartReplica(t, db.URL)
	ag := EnrollAgent(t, a, a.URL())
	ag.Start()
	a.WaitOnlineOn(t, ag.Node)
	waitKept(t, ag, b)

	w := Workload{Lines: 30, Every: 100 * time.Millisecond, Code: 7}
	run := StartRun(t, []string{a.URL(), b.URL()}, w.Args(t)...)
	run.WaitStdout(t, w.Line(5))
	a.Kill()
	if bytes.Contains(run.Stdout(), []byte("sha256 ")) {
		t.Fatal("the task ended before its replica was killed: the row tested nothing")
	}

	killed := time.Now()
	b.WaitOnlineOn(t, ag.Node)
	t.Logf("the node was online on the other replica %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	tk := w.Check(t, b, run)
	checkEventsOnce(t, b.Tasks(), tk.Id)
	if tk.Attempt != 1 {
		t.Errorf("the task ended as attempt %d, want 1: the node re-homed, nothing should have been retried", tk.Attempt)
	}
	NothingLeft(t, ag.Node)
}

// TestAgentRestartedWhileItsReplicaIsDead is defect 5 on processes: the agent,
// enrolled with replica A, is restarted while A is dead (SIGKILLed) and
// must come online on B, which it knows only from the list it keeps on
// disk. Then a replica C started after the node connected must be learnt
// (pushed to the node, kept): with A and B both SIGKILLed the node must be
// online on C, and a task submitted to C runs there, byte-exact with its
// own exit code.
func TestAgentRestartedWhileItsReplicaIsDead(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	a := StartReplica(t, db.URL)
	b := StartReplica(t, db.URL)
	ag := EnrollAgent(t, a, a.URL())
	ag.Start()
	a.WaitOnlineOn(t, ag.Node)
	waitKept(t, ag, b)

	a.Kill()
	ag.Restart()
	restarted := time.Now()
	b.WaitOnlineOn(t, ag.Node)
	t.Logf("the restarted agent was online on B %s after it started", time.Since(restarted).Round(100*time.Millisecond))

	c := StartReplica(t, db.URL)
	waitKept(t, ag, c)
	b.Kill()
	killed := time.Now()
	c.WaitOnlineOn(t, ag.Node)
	t.Logf("the node was online on C %s after B was killed", time.Since(killed).Round(100*time.Millisecond))

	w := Workload{Lines: 5, Every: 50 * time.Millisecond, Code: 4}
	run := StartRun(t, []string{c.URL()}, w.Args(t)...)
	tk := w.Check(t, c, run)
	if tk.NodeId != ag.Node {
		t.Errorf("the task ran on node %q, want the re-homed %s", tk.NodeId, ag.Node)
	}
	NothingLeft(t, ag.Node)
	if n, err := c.Node(ag.Node); err != nil || n.Status != podiumv1.NodeStatus_NODE_STATUS_ONLINE {
		t.Errorf("after the task the node is %v (%v) at C, want online", n.GetStatus(), err)
	}
}
