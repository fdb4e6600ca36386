package faults

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// postgresRestartMidTask restarts the test's own Postgres (`pg_ctl restart
// -m MODE`: down, then up) while a task prints, and checks that it went
// unnoticed by the user: the task finishes, `podium run` exits with the
// task's code, output printed and stored is byte-exact against the task's
// own checksum, the node is back online without anyone doing anything, and
// nothing is left in Docker.
//
// The restart lands inside the task: its container is running, as the
// engine says, just before Postgres goes down and still running when
// Postgres accepts connections again. The workload prints its checksum
// line as its last act, so that line, and whatever lines were left, were
// printed after Postgres came back, and Check finds them in the stored log.
func postgresRestartMidTask(t *testing.T, mode string) {
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	// 15 s of printing: the restart, begun at line 5, ends well inside it.
	w := Workload{Lines: 60, Every: 250 * time.Millisecond, Code: 3}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(5))
	if !taskContainerRunning(t, id) {
		t.Fatalf("task %s printed line 5 but its container is not running before the restart", id)
	}
	if err := pg.Down(mode); err != nil {
		t.Fatalf("stop Postgres -m %s: %v", mode, err)
	}
	if err := pg.Up(); err != nil {
		t.Fatalf("start Postgres again after -m %s: %v", mode, err)
	}
	if !taskContainerRunning(t, id) {
		t.Errorf("task %s's container had ended when Postgres came back: the restart did not land while the task ran "+
			"(make the workload longer)", id)
	}
	w.Check(t, r, run)
	r.WaitOnlineOn(t, a.Node)
	NothingLeft(t, a.Node)
}

// taskContainerRunning says whether the engine lists the task's container
// as running.
func taskContainerRunning(t *testing.T, task string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := dockertest.Client(t).ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "podium.task="+task), filters.Arg("label", "podium.role=task"), filters.Arg("status", "running"))})
	if err != nil {
		t.Fatalf("list task %s's running container: %v", task, err)
	}
	return len(cs) == 1
}

func TestPostgresRestartFastMidTask(t *testing.T) {
	t.Parallel()
	postgresRestartMidTask(t, "fast")
}

func TestPostgresRestartImmediateMidTask(t *testing.T) {
	t.Parallel()
	postgresRestartMidTask(t, "immediate")
}
