package faults

import (
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/pgtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// postgresRestartMidTask restarts the test's own Postgres with `pg_ctl
// restart -m MODE` while a task prints, and checks that it went unnoticed
// by the user: the task finishes, `podium run` exits with the task's code,
// output printed and stored is byte-exact against the task's own checksum,
// the node is back online without anyone doing anything, and nothing is
// left in Docker.
func postgresRestartMidTask(t *testing.T, mode string) {
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w := Workload{Lines: 40, Every: 100 * time.Millisecond, Code: 3}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	run.WaitStdout(t, w.Line(5))
	if err := pg.Restart(mode); err != nil {
		t.Fatalf("restart Postgres -m %s: %v", mode, err)
	}
	w.Check(t, r, run)
	r.WaitOnlineOn(t, a.Node)
	NothingLeft(t, a.Node)
}

func TestPostgresRestartFastMidTask(t *testing.T) {
	t.Parallel()
	postgresRestartMidTask(t, "fast")
}

func TestPostgresRestartImmediateMidTask(t *testing.T) {
	t.Parallel()
	postgresRestartMidTask(t, "immediate")
}
