package faults

import (
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// TestAgentOutOfFileDescriptors: an agent that may open 48 files
// (prlimit --nofile=48:48, where a systemd unit's LimitNOFILE would set it)
// is given 8 tasks at once, room (--max-tasks 8) for all of them but
// descriptors for about six. Before the fix the agent started them all and
// ran out (EMFILE) measuring their disk use, so their workspace limits went
// unchecked; with 22 descriptors every task then starting failed at
// whatever step hit EMFILE ("the task's egress rules could not be installed
// … pipe2: too many open files"), in words naming no limit, and running
// tasks lost their spool files. Now a task starts only while the agent has
// descriptors to spare; the others wait --fd-wait (5 s) for running ones to
// end, then fail with a reason starting "node out of
// file descriptors" that says to raise LimitNOFILE, and podium run exits 125
// (the node failed, not the task). The tasks that ran end byte-exact; the
// agent never runs out (its log has no "too many open files"), does not
// exit, its node stays online, and once the tasks have ended the next one
// runs.
func TestAgentOutOfFileDescriptors(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Wrap = []string{"prlimit", "--nofile=48:48"}
	a.Args = []string{"--max-tasks", "8", "--fd-wait", "5s"}
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w := Workload{Lines: 30, Every: 500 * time.Millisecond}
	runs := make([]*Run, 8)
	for i := range runs {
		runs[i] = StartRun(t, []string{r.URL()}, w.Args(t)...)
	}
	ran, refused := 0, 0
	for _, run := range runs {
		id := run.TaskID(t)
		code := run.Wait(t)
		tk := r.Task(t, id)
		if tk.State == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			w.Check(t, r, run)
			ran++
			continue
		}
		reason := tk.GetReason()
		if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(reason, "node out of file descriptors: ") ||
			!strings.Contains(reason, "LimitNOFILE") || tk.ExitCode != nil {
			t.Errorf("task %s ended %s with reason %q; want succeeded, or failed with no exit code and a reason "+
				"\"node out of file descriptors: …\" that says to raise LimitNOFILE", id, tk.State, reason)
			continue
		}
		if code != 125 || !strings.Contains(run.Stderr(), reason) {
			t.Errorf("podium run of %s exited %d, want 125 (the node failed, not the task) with the reason on stderr:\n%s", id, code, run.Stderr())
		}
		refused++
	}
	t.Logf("%d tasks ran, %d were refused for want of file descriptors", ran, refused)
	if ran == 0 || refused == 0 {
		t.Errorf("%d tasks ran and %d were refused; want some of each: 48 descriptors are room for about six", ran, refused)
	}
	if how := a.p.diedOnItsOwn(); how != "" {
		t.Fatalf("the agent exited on its own %s", how)
	}
	if strings.Contains(a.Log(), "too many open files") {
		t.Errorf("the agent ran out of file descriptors (its log says \"too many open files\"):\n%s", lastLines(a.Log(), 30))
	}
	if !strings.Contains(a.Log(), "LimitNOFILE") {
		t.Errorf("the agent did not warn at start that it may open few files")
	}
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	next := Workload{Lines: 3, Every: 100 * time.Millisecond}
	nr := StartRun(t, []string{r.URL()}, next.Args(t)...)
	next.Check(t, r, nr)
	NothingLeft(t, a.Node)
}
