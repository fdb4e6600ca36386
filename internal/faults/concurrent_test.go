package faults

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/dockertest"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// burstWithin bounds the wait for every run of the burst to exit: 200 tasks
// through 4 slots on a busy 2-core machine. It measures nothing: on one
// machine an engine under the whole suite's load took 7 s (median) from
// accepting a task to its container started, and the burst alone 344 s,
// the code before this change as slow.
const burstWithin = 15 * time.Minute

// TestTwoHundredConcurrentRunsOnFourSlots starts 200 `podium run` at once
// against one real agent with 4 slots: the tasks queue, run four at a time,
// and each run must come back with its own task's exit code and exactly its
// own task's output (three lines naming the run, nothing of any other),
// stored the same; every task ends as attempt 1 (no assignment was lost or
// retried); and nothing labelled by the node is left in Docker.
func TestTwoHundredConcurrentRunsOnFourSlots(t *testing.T) {
	t.Parallel()
	const runs = 200
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	a.Start() // --max-tasks 4
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	if n, err := r.Node(a.Node); err != nil || n.GetFreeSlots() != 4 {
		t.Fatalf("the node has %d free slots (%v), want 4", n.GetFreeSlots(), err)
	}

	image := dockertest.EnsureImage(t)
	want := func(i int) string {
		return fmt.Sprintf("run %[1]d of %[2]d: first\nrun %[1]d of %[2]d: second\nrun %[1]d of %[2]d: third\n", i, runs)
	}
	code := func(i int) int { return i % 7 }
	started := time.Now()
	rs := make([]*Run, runs)
	for i := range rs {
		script := fmt.Sprintf(`for w in first second third; do echo "run %d of %d: $w"; done; exit %d`, i, runs, code(i))
		rs[i] = StartRun(t, []string{r.URL()}, "--image", image, "--", "sh", "-c", script)
	}
	deadline := time.After(burstWithin)
	for i, run := range rs {
		select {
		case <-run.p.done:
		case <-deadline:
			t.Fatalf("after %s, podium run %d (and maybe others) had not exited; its stderr:\n%s", burstWithin, i, run.Stderr())
		}
	}
	t.Logf("%d concurrent podium run exited %s after they started", runs, time.Since(started).Round(time.Second))

	ids := map[string]int{}
	failed := 0
	for i, run := range rs {
		if failed >= 10 {
			t.Fatalf("giving up after 10 runs that went wrong")
		}
		got := run.p.cmd.ProcessState.ExitCode()
		out := run.Stdout()
		id := taskIDRe.FindString(run.Stderr())
		if got != code(i) || string(out) != want(i) || id == "" {
			failed++
			t.Errorf("podium run %d exited %d (want its task's %d) with stdout %q (want %q) and task %q; stderr:\n%s",
				i, got, code(i), out, want(i), id, run.Stderr())
			continue
		}
		if j, dup := ids[id]; dup {
			failed++
			t.Errorf("podium run %d and %d both followed task %s", j, i, id)
			continue
		}
		ids[id] = i
		stored, storedErr := r.StoredOutput(t, id)
		tk := r.Task(t, id)
		wantState := podiumv1.TaskState_TASK_STATE_SUCCEEDED
		if code(i) != 0 {
			wantState = podiumv1.TaskState_TASK_STATE_FAILED
		}
		if !bytes.Equal(stored, out) || len(storedErr) != 0 || tk.State != wantState || tk.GetExitCode() != int32(code(i)) || tk.Attempt != 1 || tk.NodeId != a.Node {
			failed++
			t.Errorf("task %s of run %d: stored stdout %q, stderr %q; %s (%q) exit %v attempt %d on %q; want stdout %q, no stderr, %s exit %d attempt 1 on %s",
				id, i, stored, storedErr, tk.State, tk.Reason, tk.ExitCode, tk.Attempt, tk.NodeId, out, wantState, code(i), a.Node)
		}
	}
	if !t.Failed() && len(ids) != runs {
		t.Errorf("%d distinct tasks for %d runs", len(ids), runs)
	}
	NothingLeft(t, a.Node)
	if strings.Contains(a.Log(), "level=ERROR") {
		t.Logf("the agent logged errors during the burst:\n%s", grepLines(a.Log(), "level=ERROR"))
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
