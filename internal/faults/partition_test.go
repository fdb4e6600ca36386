package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/netfault"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TestBlackHoleShorterThanUnreachableLosesNothing cuts the agent's link to
// the coordinator for 10 s mid-task, with the default thresholds (a node is
// unreachable after 30 s of silence): packets go nowhere, nothing is closed.
// Nothing may be lost and nothing marked: the node is listed online
// throughout and after, the task runs on as attempt 1 to its own end, and
// its output, printed and stored, is byte-exact against its own checksum.
//
// The agent reaches the replica only through the proxy: it enrolls through
// it, and the replica advertises the proxy's address, so the replica list
// the agent keeps leads back through the proxy too.
func TestBlackHoleShorterThanUnreachableLosesNothing(t *testing.T) {
	t.Parallel()
	const hole = 10 * time.Second
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	addr := FreeAddr(t)
	link := netfault.New(t, addr)
	r := StartReplicaAt(t, db.URL, addr, "--advertise", link.URL())
	a := EnrollAgent(t, r, link.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	// Long enough to print before, during and after the hole.
	w := Workload{Lines: 40, Every: 400 * time.Millisecond, Code: 5}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(3))

	link.BlackHole()
	printedAtCut := len(run.Stdout())
	// The hole lasts a fixed time; the node's status is sampled through it.
	// This waits for nothing: it is the fault.
	var seen []podiumv1.NodeStatus
	for end := time.Now().Add(hole); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		n, err := r.Node(a.Node)
		if err != nil {
			t.Fatalf("list the node during the black hole: %v", err)
		}
		seen = append(seen, n.Status)
		if tk := r.Task(t, id); tk.State != podiumv1.TaskState_TASK_STATE_RUNNING {
			t.Errorf("during the black hole the task is %s (%q), want running", tk.State, tk.Reason)
		}
	}
	printedInHole := len(run.Stdout()) - printedAtCut
	link.Restore()
	t.Logf("podium run printed %d bytes during the %s black hole (the task printed on)", printedInHole, hole)
	for _, s := range seen {
		if s != podiumv1.NodeStatus_NODE_STATUS_ONLINE {
			t.Errorf("during a %s black hole the node was listed %v (samples %v); want online throughout (unreachable only after 30 s)", hole, s, seen)
			break
		}
	}

	tk := w.Check(t, r, run)
	if tk.Attempt != 1 {
		t.Errorf("the task ended as attempt %d, want 1: nothing was lost, so nothing should have been retried", tk.Attempt)
	}
	if n, err := r.Node(a.Node); err != nil || n.Status != podiumv1.NodeStatus_NODE_STATUS_ONLINE {
		t.Errorf("after the black hole the node is %v (%v), want online", n.GetStatus(), err)
	}
	NothingLeft(t, a.Node)
	// The fault was where it should be: the agent only ever reached the
	// replica through the proxy.
	for _, l := range strings.Split(a.Log(), "\n") {
		if strings.Contains(l, "connected to coordinator") && !strings.Contains(l, "coordinator="+link.URL()) {
			t.Errorf("the agent reached the coordinator around the proxy: %s", l)
		}
	}
}
