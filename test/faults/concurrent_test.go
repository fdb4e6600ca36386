package faults

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
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
// retried); and nothing labelled by the node is left in Docker. The
// engine's own start/die stamps of the node's task containers, recorded
// from before the first submit, hold 200 containers and never more than 4
// running at one instant; and the agent logged no error (agentErrorsAllowed
// lists those a burst may log, with why).
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
	life := WatchLifecycle(t, dockertest.Client(t), "podium.role=task", "podium.node="+a.Node)
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

	all := func(map[string]string) bool { return true }
	life.WaitDied(t, "task", all)
	if err := life.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(life.Containers(all)); n != runs {
		t.Errorf("the engine recorded %d task containers of the node starting, want %d (one per task, attempt 1)", n, runs)
	}
	most, when := life.MostAtOnce(all, labelOf("podium.task"))
	if most > 4 {
		t.Errorf("%d tasks ran at once on a node with 4 slots, first %s", most, when)
	}
	t.Logf("at most %d task containers ran at once (first %s)", most, when)

	if errs := unexplained(a.Log(), agentErrorsAllowed); errs != "" {
		t.Errorf("the agent logged errors during the burst that nothing explains (agentErrorsAllowed):\n%s", errs)
	}
}

// agentErrorsAllowed are the agent's ERROR lines a burst may log, each a
// substring of the line and why it is not a fault. None: a burst on a
// healthy machine is no reason for one.
var agentErrorsAllowed = map[string]string{}

// unexplained is the lines of log at level ERROR that contain none of
// allowed's keys.
func unexplained(log string, allowed map[string]string) string {
	var b strings.Builder
	for _, l := range strings.Split(grepLines(log, "level=ERROR"), "\n") {
		ok := l == ""
		for sub := range allowed {
			ok = ok || strings.Contains(l, sub)
		}
		if !ok {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
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
