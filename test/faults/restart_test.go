package faults

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// taskRunningInDocker reports whether a container of the task is running in
// the local engine.
func taskRunningInDocker(t testing.TB, id string) bool {
	t.Helper()
	cs, err := dockertest.Client(t).ContainerList(context.Background(), container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", executor.LabelTask+"="+id), filters.Arg("status", "running")),
	})
	if err != nil {
		t.Fatalf("list the task's containers: %v", err)
	}
	return len(cs) > 0
}

// TestAgentAndCoordinatorKilledTogether SIGKILLs the agent and the only
// replica in the same window, mid-task: the agent is started again while
// the replica is still down (it must keep dialling), and the replica only
// after that. The task's container ran on meanwhile: the restarted agent
// must adopt it (attempt 1, nothing retried), send what it printed while
// nobody listened, and `podium run`, which kept reconnecting to the one
// address, must exit with the task's code having printed its output
// byte-exact (stored output too).
func TestAgentAndCoordinatorKilledTogether(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	ag := EnrollAgent(t, r, r.URL())
	ag.Start()
	r.WaitOnlineOn(t, ag.Node)

	w := Workload{Lines: 40, Every: 250 * time.Millisecond, Code: 6}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(5))
	ag.Kill()
	r.Kill()
	ag.Start()
	r.Start()
	// Adoption is what this row is about: the task's container must still
	// be running once both are back, with nobody having watched it.
	if !taskRunningInDocker(t, id) {
		t.Fatal("the task's container is not running once the agent and the replica are back: the task ended inside the fault window, and the row tested no adoption")
	}

	r.WaitOnlineOn(t, ag.Node)
	tk := w.Check(t, r, run)
	checkEventsOnce(t, r.Tasks(), id)
	if tk.Attempt != 1 {
		t.Errorf("the task ended as attempt %d, want 1: the restarted agent should have adopted it", tk.Attempt)
	}
	NothingLeft(t, ag.Node)
}
