package faults

import (
	"bytes"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// TestDockerEngineRestartMidTask restarts the node's Docker engine (a
// private dockerd the test starts, with its own data root, exec root and
// socket) under a running task: with SIGTERM, as `systemctl restart docker`
// does (the engine stops its containers as it goes), then with SIGKILL, as a
// crash and systemd's restart do (the containers outlive the engine, which
// stops them when it starts again). Each time (issue 14, defect 1):
//
//   - the task fails with a reason saying the engine restarted, and no exit
//     code: the engine's SIGTERM is not the task's answer;
//   - podium run exits 125, an infrastructure failure;
//   - what it printed is what is stored, byte for byte: the task's lines up
//     to the restart, in order;
//   - nothing labelled with the node is left in the engine (its network and
//     volume, which the engine refused to remove as it went down, are
//     removed once it is back);
//   - the agent was not restarted, and the node runs the next task to its
//     own end.
func TestDockerEngineRestartMidTask(t *testing.T) {
	t.Parallel()
	pe := dockertest.StartPrivateEngine(t)
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Env = []string{"DOCKER_HOST=" + pe.Host()}
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		// Far longer than the test: the engine's restart ends it.
		w := Workload{Lines: 600, Every: 100 * time.Millisecond, Code: 3}
		run := StartRun(t, []string{r.URL()}, w.Args(t)...)
		id := run.TaskID(t)
		run.WaitStdout(t, w.Line(3))

		pe.Restart(sig)

		code := run.Wait(t)
		tk := r.Task(t, id)
		if code != 125 {
			t.Errorf("engine restarted with %v: podium run exited %d, want 125; task %s, reason %q; stderr:\n%s",
				sig, code, tk.State, tk.Reason, run.Stderr())
		}
		if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.Reason, "engine restarted") || tk.ExitCode != nil {
			exitCode := "none"
			if tk.ExitCode != nil {
				exitCode = strconv.Itoa(int(tk.GetExitCode()))
			}
			t.Errorf("engine restarted with %v: task ended %s (%q) with exit code %s, want failed, reason starting "+
				"\"engine restarted\", no exit code", sig, tk.State, tk.Reason, exitCode)
		}
		if !strings.Contains(run.Stderr(), "engine restarted") {
			t.Errorf("engine restarted with %v: podium run does not say so; stderr:\n%s", sig, run.Stderr())
		}
		out := run.Stdout()
		if len(out) < len(w.Line(1)+w.Line(2)+w.Line(3)) || !bytes.HasPrefix(w.want(), out) {
			t.Errorf("engine restarted with %v: podium run printed:\n%s\nwant the task's lines from the first, in order, to where it was stopped", sig, out)
		}
		if stored, _ := r.StoredOutput(t, id); !bytes.Equal(stored, out) {
			t.Errorf("engine restarted with %v: the stored stdout (%d bytes) differs from what podium run printed (%d bytes)",
				sig, len(stored), len(out))
		}
		NothingLeftIn(t, pe.Client(), a.Node)
	}

	w := Workload{Lines: 5, Every: 10 * time.Millisecond, Code: 3}
	run := StartRun(t, []string{r.URL()}, w.Args(t)...)
	w.Check(t, r, run)
	NothingLeftIn(t, pe.Client(), a.Node)
	if n := strings.Count(a.Log(), "=== harness: start agent"); n != 1 {
		t.Errorf("the agent was started %d times, want once: it must ride out the engine's restarts", n)
	}
}
