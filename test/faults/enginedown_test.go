package faults

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// TestEngineDownNodeTakesNoWork (a node whose Docker engine was down was a
// black hole: every task placed on it failed at once with "image … could
// not be inspected: Cannot connect to the Docker daemon …", about three a
// second for the whole outage). Two nodes: "down" runs on a private engine
// the test stops (as `systemctl stop docker` does), the other on the
// machine's. While the engine is stopped: tasks any node may run all run on
// the other node and succeed; a task only down may run waits queued, its
// reason (`podium task get`) naming the engine, rather than failing there;
// and `podium node get` says since when the engine has not answered. Once
// the engine is started again the waiting task runs on down and succeeds,
// and nothing is left in either engine.
func TestEngineDownNodeTakesNoWork(t *testing.T) {
	t.Parallel()
	pe := dockertest.StartPrivateEngine(t)
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	down := EnrollAgent(t, r, r.URL())
	down.Env = []string{"DOCKER_HOST=" + pe.Host()}
	down.Start()
	other := EnrollAgent(t, r, r.URL())
	other.Start()
	r.WaitNode(t, down.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	r.WaitNode(t, other.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	if _, err := r.Admin().SetNodeLabels(context.Background(), connect.NewRequest(&podiumv1.SetNodeLabelsRequest{
		NodeId: down.Node, Add: []string{"engine=private"}})); err != nil {
		t.Fatalf("label the node on the private engine: %v", err)
	}
	img := dockertest.EnsureImage(t)

	pe.Stop(syscall.SIGTERM)

	// Tasks any node may run, submitted as soon as the engine is gone:
	// the scheduler may still offer some to down before its heartbeat
	// says the engine is gone, and down must give those back, not fail
	// them.
	elsewhere := make([]*Run, 6)
	for i := range elsewhere {
		elsewhere[i] = StartRun(t, []string{r.URL()}, "--image", img, "--", "echo", "elsewhere")
	}
	for i, run := range elsewhere {
		id := run.TaskID(t)
		code := run.Wait(t)
		tk := r.Task(t, id)
		if code != 0 || string(run.Stdout()) != "elsewhere\n" {
			t.Fatalf("task %d (%s), which any node may run, while one node's engine is down: exit %d, stdout %q, ended %s on %s (%q); stderr:\n%s",
				i, id, code, run.Stdout(), tk.State, tk.GetNodeId(), tk.GetReason(), run.Stderr())
		}
		if tk.GetNodeId() != other.Node {
			t.Fatalf("task %s ran on node %s, want the node whose engine answers, %s", id, tk.GetNodeId(), other.Node)
		}
	}

	pinned := StartRun(t, []string{r.URL()}, "--label", "engine=private", "--image", img, "--", "echo", "pinned-runs")
	pinnedID := pinned.TaskID(t)
	waitQueuedWhy(t, r, pinnedID, "the engine-down node", "Docker engine has not answered since")
	nodeGet := StartPodium(t, []string{r.URL()}, "node", "get", down.Node)
	if code := nodeGet.Wait(t); code != 0 || !strings.Contains(string(nodeGet.Stdout()), "has not answered since") {
		t.Fatalf("podium node get %s (exit %d) does not say its engine is down; stdout:\n%s", down.Node, code, nodeGet.Stdout())
	}

	pe.Start()
	if code := pinned.Wait(t); code != 0 || string(pinned.Stdout()) != "pinned-runs\n" {
		tk := r.Task(t, pinnedID)
		t.Fatalf("the task pinned to the node whose engine is back: exit %d, stdout %q, ended %s (%q); stderr:\n%s",
			code, pinned.Stdout(), tk.State, tk.GetReason(), pinned.Stderr())
	}
	if tk := r.Task(t, pinnedID); tk.GetNodeId() != down.Node || tk.GetAttempt() != 1 {
		t.Fatalf("the pinned task ran on %s in attempt %d, want %s in attempt 1 (a task given back uses no attempt)",
			tk.GetNodeId(), tk.GetAttempt(), down.Node)
	}
	NothingLeftIn(t, pe.Client(), down.Node)
	NothingLeft(t, other.Node)
}
