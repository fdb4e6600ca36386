package e2e

import (
	"testing"

	"github.com/podiumhq/podium/internal/testenv/coordtest"
)

// TestFollowerFailsOverToAnotherReplica follows a task through replica A
// with --server listing A and B, and stops A mid-task: the node moves to B
// (HelloAck listed it), and podium run carries on through B to the task's
// end with every byte once and the task's exit code, where it used to hang
// after its one "reconnecting" line.
func TestFollowerFailsOverToAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := coordtest.Start(t, e.db.URL, e.opts)
	// A new Hello, so that the agent's HelloAck lists B too.
	e.stopAgent()
	e.startAgent()

	f := e.followEnv([]string{"PODIUM_SERVER=" + e.r.URL() + "," + b.URL()}, "--image", e.image, "--", "sh", "-c", slowScript)
	f.waitStdout(t, "\n5\n")
	a := e.r
	e.r = b // for checkSlowTask's own calls
	a.Stop()
	e.checkSlowTask(t, f)
}
