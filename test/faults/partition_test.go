package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/netfault"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
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

// Shortened thresholds for the rows past offline: the node is told to
// heartbeat every second, is unreachable after 3 s and offline after 8 s of
// silence (the watchdog sweeps every 5 s, so it is declared 8-13 s in).
var pastOffline = []string{"--heartbeat-interval", "1s", "--unreachable-after", "3s", "--offline-after", "8s"}

// retrySpec writes the spec file of a task the control plane requeues when
// its node is lost, twice at most: `podium run --spec FILE` takes the rest
// from the command line.
func retrySpec(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "retry.yaml")
	if err := os.WriteFile(p, []byte("retry_on_node_loss: true\nmax_attempts: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// watchCopies starts the engine's start/die record of task containers
// (every node's, on the host engine), before the task is submitted so that
// its first attempt is in it too.
func watchCopies(t *testing.T) *Lifecycle {
	t.Helper()
	return WatchLifecycle(t, dockertest.Client(t), "podium.role=task")
}

// checkNeverTwoCopies checks, once the task has ended and its containers
// are gone, the engine's record of its containers: each attempt in want
// started a container, and at no instant did containers of two attempts
// run at once (two attempts of one task running at the same moment are what
// fencing exists to prevent). The record is the engine's own start and die
// stamps, so an overlap of any length is seen.
func checkNeverTwoCopies(t *testing.T, life *Lifecycle, task string, want ...string) {
	t.Helper()
	isTask := labelIs("podium.task", task)
	life.WaitDied(t, "task "+task, isTask)
	if err := life.Stop(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var lives []string
	for _, c := range life.Containers(isTask) {
		seen[c.Labels["podium.attempt"]] = true
		lives = append(lives, fmt.Sprintf("attempt %s on %s: %s to %s", c.Labels["podium.attempt"], c.Labels["podium.node"],
			time.Unix(0, c.Start).UTC().Format("15:04:05.000000"), time.Unix(0, c.Die).UTC().Format("15:04:05.000000")))
	}
	for _, a := range want {
		if !seen[a] {
			t.Errorf("the engine recorded no container of attempt %s of the task; it recorded:\n%s", a, strings.Join(lives, "\n"))
		}
	}
	if most, when := life.MostAtOnce(isTask, labelOf("podium.attempt")); most > 1 {
		t.Errorf("%d attempts of the task ran at once, first %s; the containers:\n%s", most, when, strings.Join(lives, "\n"))
	}
}

// storedStdout is the task's stored stdout: each attempt's, and what a
// follower of the task was shown, every attempt's chunks in the log's
// order up to the event that ended the task.
func storedStdout(t *testing.T, r *Replica, task string) (byAttempt map[int32][]byte, untilEnd []byte) {
	t.Helper()
	stream, err := r.Tasks().Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: task}))
	if err != nil {
		t.Fatalf("events of %s: %v", task, err)
	}
	defer stream.Close()
	byAttempt = map[int32][]byte{}
	ended := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if l := ev.GetLog(); l != nil && l.GetStream() != podiumv1.LogStream_LOG_STREAM_STDERR {
			byAttempt[ev.GetAttempt()] = append(byAttempt[ev.GetAttempt()], l.GetData()...)
			if !ended {
				untilEnd = append(untilEnd, l.GetData()...)
			}
		}
		if st := ev.GetStatus(); st != nil && final(st.GetState()) {
			ended = true
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("events of %s: %v", task, err)
	}
	return byAttempt, untilEnd
}

func final(s podiumv1.TaskState) bool {
	switch s {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
		return true
	}
	return false
}

// checkAttemptsOutput checks the output of a workload task that ended as
// attempt last after earlier attempts were stopped: each chunk of each
// attempt is stored once (checkEventsOnce); the last attempt's stored
// stdout is every line once, in order, then the task's own sha256 of those
// bytes; each earlier attempt's is the start of the workload's output, its
// first lines once each and in order (a stopped attempt's output is cut,
// never doubled or mixed with another's); and podium run printed exactly the stored stdout
// up to the task's end, in the log's order.
func (w Workload) checkAttemptsOutput(t *testing.T, r *Replica, run *Run, task string, last int32) {
	t.Helper()
	checkEventsOnce(t, r.Tasks(), task)
	byAttempt, untilEnd := storedStdout(t, r, task)
	for a, out := range byAttempt {
		if a < 1 || a > last {
			t.Errorf("task %s stored stdout of attempt %d, which never ran (it ended as attempt %d):\n%s", task, a, last, out)
		}
	}
	out := byAttempt[last]
	body, sum, ok := splitChecksum(out)
	switch {
	case !ok:
		t.Errorf("task %s: attempt %d's stored stdout does not end with the task's checksum line:\n%s", task, last, out)
	case !bytes.Equal(body, w.want()):
		t.Errorf("task %s: attempt %d's stored stdout before the checksum line is:\n%s\nwant lines 1..%d once each, in order", task, last, body, w.Lines)
	default:
		if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
			t.Errorf("task %s: attempt %d's stored stdout has sha256 %x, the task's own checksum says %s", task, last, got, sum)
		}
	}
	for a := int32(1); a < last; a++ {
		got := byAttempt[a]
		if !bytes.HasPrefix(w.want(), got) {
			t.Errorf("task %s: attempt %d's stored stdout is:\n%s\nwant the start of the workload's output: its first lines once each, in order", task, a, got)
		}
		t.Logf("task %s: attempt %d, stopped, stored %d bytes of its output (%d whole lines)", task, a, len(got), bytes.Count(got, []byte("\n")))
	}
	if printed := run.Stdout(); !bytes.Equal(printed, untilEnd) {
		t.Errorf("podium run printed %d bytes of stdout, the stored stdout up to the task's end is %d:\nprinted:\n%s\nstored:\n%s",
			len(printed), len(untilEnd), printed, untilEnd)
	}
}

// attemptRows counts the task's rows in podium.attempts: one per placement
// a node accepted (or lost), none for an assignment given back.
func attemptRows(t *testing.T, dbURL, task string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from podium.attempts where task_id = $1", task).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// notes are the notes stored in the task's log, one per line.
func notes(t *testing.T, r *Replica, task string) string {
	t.Helper()
	stream, err := r.Tasks().Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: task}))
	if err != nil {
		t.Fatalf("events of %s: %v", task, err)
	}
	defer stream.Close()
	var b strings.Builder
	for stream.Receive() {
		if n := stream.Msg().GetEvent().GetNote(); n != nil {
			b.WriteString(n.GetText() + "\n")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("events of %s: %v", task, err)
	}
	return b.String()
}

// TestBlackHolePastOfflineNeverRunsTwoCopies cuts node A's link for longer
// than the offline threshold while it runs a task with retry_on_node_loss and
// max_attempts 2, with a second node B connected directly. The control plane
// gives A up and runs the task again on B; A, which reaches no replica,
// fences itself first: it stops attempt 1, says so in its log and the task's
// notes, so at no moment do two attempts of the task run. When the link comes
// back A is online again, and the task ends as attempt 2 of 2 with two rows
// in podium.attempts; podium run exits with the task's code. Attempt 2's
// stored output is byte-exact against its own checksum, attempt 1's is the
// start of the workload's output, and podium run printed exactly what was
// stored (checkAttemptsOutput); the engine's start/die record shows both
// attempts' containers and never the two at once (checkNeverTwoCopies).
func TestBlackHolePastOfflineNeverRunsTwoCopies(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	addr := FreeAddr(t)
	link := netfault.New(t, addr)
	r := StartReplicaAt(t, db.URL, addr, append([]string{"--advertise", link.URL()}, pastOffline...)...)
	a := EnrollAgent(t, r, link.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w := Workload{Lines: 30, Every: 500 * time.Millisecond, Code: 4}
	life := watchCopies(t)
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))
	// Node B, reached without the proxy, is where the task can go next.
	b := EnrollAgent(t, r, r.URL())
	b.Start()
	r.WaitNode(t, b.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	link.BlackHole()
	wait.For(t, 60*time.Second, "the task to run again as attempt 2 on node B", func() bool {
		tk := r.Task(t, id)
		return tk.Attempt == 2 && tk.NodeId == b.Node && tk.State == podiumv1.TaskState_TASK_STATE_RUNNING
	})
	if !strings.Contains(a.Log(), "fencing: stopping a task the control plane will requeue") {
		t.Errorf("node A's log does not say it fenced itself")
	}
	link.Restore()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w.checkFailedAsAttemptTwo(t, r, run, db.URL, id)
	wait.For(t, 30*time.Second, "node A's note on the fenced attempt in the task's log", func() bool {
		return strings.Contains(notes(t, r, id), "fenced: this node reached no coordinator replica")
	})
	w.checkAttemptsOutput(t, r, run, id, 2)
	NothingLeft(t, a.Node)
	NothingLeft(t, b.Node)
	checkNeverTwoCopies(t, life, id, "1", "2")
}

// checkFailedAsAttemptTwo checks how a row whose task was run again on
// another node ends: podium run exited with the task's own code, and the
// task failed with it as attempt 2 of 2, with two rows in podium.attempts.
func (w Workload) checkFailedAsAttemptTwo(t *testing.T, r *Replica, run *Run, dbURL, id string) {
	t.Helper()
	if code := run.Wait(t); code != w.Code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", code, w.Code, run.Stderr())
	}
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != int32(w.Code) || tk.Attempt != 2 {
		t.Errorf("the task ended %s (%q) as attempt %d with code %v, want failed with its own %d as attempt 2 of 2",
			tk.State, tk.Reason, tk.Attempt, tk.ExitCode, w.Code)
	}
	if n := attemptRows(t, dbURL, id); n != 2 {
		t.Errorf("podium.attempts holds %d rows for the task, want 2", n)
	}
}

// TestBlackHolePastOfflineOneNodeEndsAtAttemptTwo is the partition of
// issue 14 on a node with one slot and no other node: the control plane
// requeues the task (retry_on_node_loss, max_attempts 2) while the node is
// cut off, and when the link comes back the same node runs it again. It
// ends as attempt 2 of 2 with at most two rows in podium.attempts, never
// looping through assignments the node gives back ("no free slot"), and
// never two attempts at once by the engine's start/die record
// (checkNeverTwoCopies). Attempt 2's stored output is byte-exact against its
// own checksum, attempt 1's is the start of the workload's output, and
// podium run printed exactly what was stored (checkAttemptsOutput).
func TestBlackHolePastOfflineOneNodeEndsAtAttemptTwo(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	addr := FreeAddr(t)
	link := netfault.New(t, addr)
	r := StartReplicaAt(t, db.URL, addr, append([]string{"--advertise", link.URL()}, pastOffline...)...)
	a := EnrollAgent(t, r, link.URL())
	a.Args = []string{"--max-tasks", "1"}
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	// Long enough that an attempt left running through the hole is still
	// running when the link comes back.
	w := Workload{Lines: 60, Every: 400 * time.Millisecond, Code: 0}
	life := watchCopies(t)
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))

	link.BlackHole()
	wait.For(t, 60*time.Second, "the control plane to give the node up and requeue the task", func() bool {
		return r.Task(t, id).State == podiumv1.TaskState_TASK_STATE_QUEUED
	})
	link.Restore()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	if code := run.Wait(t); code != w.Code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", code, w.Code, run.Stderr())
	}
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.Attempt != 2 {
		t.Errorf("the task ended %s (%q) as attempt %d, want succeeded as attempt 2 of 2", tk.State, tk.Reason, tk.Attempt)
	}
	if n := attemptRows(t, db.URL, id); n > 2 {
		t.Errorf("podium.attempts holds %d rows for the task, want at most 2", n)
	}
	if n := strings.Count(a.Log(), "rejecting assignment: no free slot"); n > 0 {
		t.Errorf("the node gave back %d assignments of the task after the partition", n)
	}
	w.checkAttemptsOutput(t, r, run, id, 2)
	NothingLeft(t, a.Node)
	checkNeverTwoCopies(t, life, id, "1", "2")
}

// TestFrozenAgentPastOfflineNeverRunsTwoCopies freezes node A's agent
// (SIGSTOP, a hung process: its connection stays open, nothing it runs is
// told) for longer than the offline threshold while A runs a task with
// retry_on_node_loss and max_attempts 2, with a second node B online. The
// control plane gives A up and runs the task again on B. A frozen agent
// cannot fence anything itself, so the task's runner, PID 1 of its
// container, does: the agent renews a lease the runner reads, and once the
// lease runs out — at the moment the agent would have fenced — the runner
// stops the command and the container ends. By the engine's own start/die
// record the two attempts never ran at once (checkNeverTwoCopies). When the
// agent is thawed A is online again, the task ends as attempt 2 of 2 with
// the task's own exit code, and attempt 2's stored output is byte-exact
// (checkAttemptsOutput).
func TestFrozenAgentPastOfflineNeverRunsTwoCopies(t *testing.T) {
	t.Parallel()
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL, pastOffline...)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	// Long enough that, unfenced, attempt 1 would still run when attempt 2 starts.
	w := Workload{Lines: 60, Every: 500 * time.Millisecond, Code: 6}
	life := watchCopies(t)
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))
	if tk := r.Task(t, id); tk.NodeId != a.Node {
		t.Fatalf("the task runs on %s, want node A (%s), the only node so far", tk.NodeId, a.Node)
	}
	b := EnrollAgent(t, r, r.URL())
	b.Start()
	r.WaitNode(t, b.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	a.Freeze()
	wait.For(t, 60*time.Second, "the task to run again as attempt 2 on node B", func() bool {
		tk := r.Task(t, id)
		return tk.Attempt == 2 && tk.NodeId == b.Node && tk.State == podiumv1.TaskState_TASK_STATE_RUNNING
	})
	life.WaitDied(t, "attempt 1's container, stopped by its runner while the agent is frozen", func(l map[string]string) bool {
		return l["podium.task"] == id && l["podium.attempt"] == "1"
	})
	a.Thaw()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w.checkFailedAsAttemptTwo(t, r, run, db.URL, id)
	w.checkAttemptsOutput(t, r, run, id, 2)
	NothingLeft(t, a.Node)
	NothingLeft(t, b.Node)
	checkNeverTwoCopies(t, life, id, "1", "2")
}

// TestFrozenAgentBetweenFenceAndOfflineRunsTheTaskAgain freezes node A's
// agent (SIGSTOP) for longer than its fence point but shorter than the
// offline threshold (betweenFenceAndOffline); TestAgentDownBetweenFenceAndOfflineRunsTheTaskAgain
// stops it (SIGTERM) for as long and starts it again.
func TestFrozenAgentBetweenFenceAndOfflineRunsTheTaskAgain(t *testing.T) {
	t.Parallel()
	betweenFenceAndOffline(t, (*Agent).Freeze, (*Agent).Thaw)
}

func TestAgentDownBetweenFenceAndOfflineRunsTheTaskAgain(t *testing.T) {
	t.Parallel()
	betweenFenceAndOffline(t, (*Agent).Stop, (*Agent).Start)
}

// betweenFenceAndOffline takes node A's agent away (away) right after a
// heartbeat, for 18 s, and brings it back (back), while A runs a task with
// retry_on_node_loss and max_attempts 2: with heartbeats every 4 s and the
// node offline after 20 s, the node's fence point is 16 s after the last
// answer, so the task's runner fences attempt 1 when the agent's lease runs
// out, while the control plane never declares the node offline. Attempt 1's
// end must not be taken for the task's own ("failed: fenced"): the agent
// holds it, starts a stream whose Hello leaves the attempt out, and the
// control plane applies its node-loss policy, so the task runs again and
// ends as attempt 2 with its own exit code; by the engine's start/die
// record, never two at once.
func betweenFenceAndOffline(t *testing.T, away, back func(*Agent)) {
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	r := StartReplica(t, db.URL, "--heartbeat-interval", "4s", "--unreachable-after", "10s", "--offline-after", "20s")
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	w := Workload{Lines: 80, Every: 400 * time.Millisecond, Code: 3}
	life := watchCopies(t)
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))

	// Away right after a heartbeat, so that 18 s of silence is past the
	// fence point (16 s) and short of the offline threshold (20 s).
	n, err := r.Node(a.Node)
	if err != nil {
		t.Fatal(err)
	}
	before := n.GetLastHeartbeatAt().AsTime()
	wait.For(t, 30*time.Second, "node A's next heartbeat", func() bool {
		n, err := r.Node(a.Node)
		return err == nil && n.GetLastHeartbeatAt().AsTime().After(before)
	})
	away(a)
	gone := time.Now()
	life.WaitDied(t, "attempt 1's container, fenced by its runner while the agent is away", func(l map[string]string) bool {
		return l["podium.task"] == id && l["podium.attempt"] == "1"
	})
	// The fault is its length: it ends at 18 s whatever happened.
	time.Sleep(time.Until(gone.Add(18 * time.Second)))
	if n, err := r.Node(a.Node); err != nil || n.Status == podiumv1.NodeStatus_NODE_STATUS_OFFLINE {
		t.Fatalf("node A is %v (%v) 18 s into the fault; the row needs it short of offline (20 s)", n.GetStatus(), err)
	}
	back(a)

	if code := run.Wait(t); code != w.Code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", code, w.Code, run.Stderr())
	}
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != int32(w.Code) || tk.Attempt != 2 {
		t.Errorf("the task ended %s (%q) as attempt %d with code %v, want its own exit %d as attempt 2: run again, not failed as fenced",
			tk.State, tk.Reason, tk.Attempt, tk.ExitCode, w.Code)
	}
	NothingLeft(t, a.Node)
	checkNeverTwoCopies(t, life, id, "1", "2")
}
