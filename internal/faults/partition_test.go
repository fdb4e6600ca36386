package faults

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/internal/testenv/dockertest"
	"github.com/podiumhq/podium/internal/testenv/netfault"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
	"github.com/podiumhq/podium/internal/testenv/wait"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
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

// copies watches the engine for the task's running attempts until stop is
// called, and returns the most that ran at once with the samples that saw
// them. Two attempts of one task running at the same moment are what
// fencing exists to prevent.
func copies(t *testing.T, task string) (stop func() (most int, when []string)) {
	t.Helper()
	c := dockertest.Client(t)
	var (
		mu   sync.Mutex
		best int
		seen []string
	)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		f := filters.NewArgs(filters.Arg("label", "podium.task="+task), filters.Arg("label", "podium.role=task"),
			filters.Arg("status", "running"))
		for {
			cs, err := c.ContainerList(context.Background(), container.ListOptions{Filters: f})
			if err == nil {
				attempts := map[string]bool{}
				for _, ct := range cs {
					attempts[ct.Labels["podium.attempt"]] = true
				}
				mu.Lock()
				if len(attempts) > best {
					best = len(attempts)
				}
				if len(attempts) > 1 && len(seen) < 5 { // the first few say when
					var as []string
					for a := range attempts {
						as = append(as, a)
					}
					seen = append(seen, time.Now().Format(time.StampMilli)+": attempts "+strings.Join(as, ", "))
				}
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(wait.Poll):
			}
		}
	}()
	var once sync.Once
	stop = func() (int, []string) {
		once.Do(func() { close(done); <-stopped })
		mu.Lock()
		defer mu.Unlock()
		return best, seen
	}
	t.Cleanup(func() { stop() })
	return stop
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
// in podium.attempts; podium run exits with the task's code.
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
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))
	running := copies(t, id)
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

	if code := run.Wait(t); code != w.Code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", code, w.Code, run.Stderr())
	}
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != int32(w.Code) || tk.Attempt != 2 {
		t.Errorf("the task ended %s (%q) as attempt %d with code %v, want failed with its own %d as attempt 2 of 2",
			tk.State, tk.Reason, tk.Attempt, tk.ExitCode, w.Code)
	}
	if n := attemptRows(t, db.URL, id); n != 2 {
		t.Errorf("podium.attempts holds %d rows for the task, want 2", n)
	}
	if most, when := running(); most > 1 {
		t.Errorf("two attempts of the task ran at once:\n%s", strings.Join(when, "\n"))
	}
	wait.For(t, 30*time.Second, "node A's note on the fenced attempt in the task's log", func() bool {
		return strings.Contains(notes(t, r, id), "fenced: this node reached no coordinator replica")
	})
	NothingLeft(t, a.Node)
	NothingLeft(t, b.Node)
}

// TestBlackHolePastOfflineOneNodeEndsAtAttemptTwo is the partition of
// issue 14 on a node with one slot and no other node: the control plane
// requeues the task (retry_on_node_loss, max_attempts 2) while the node is
// cut off, and when the link comes back the same node runs it again. It
// ends as attempt 2 of 2 with at most two rows in podium.attempts, never
// looping through assignments the node gives back ("no free slot"), and
// never two attempts at once.
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
	run := StartRun(t, []string{r.URL()}, append([]string{"--spec", retrySpec(t)}, w.Args(t)...)...)
	id := run.TaskID(t)
	run.WaitStdout(t, w.Line(2))
	running := copies(t, id)

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
	if most, when := running(); most > 1 {
		t.Errorf("two attempts of the task ran at once:\n%s", strings.Join(when, "\n"))
	}
	if n := strings.Count(a.Log(), "rejecting assignment: no free slot"); n > 0 {
		t.Errorf("the node gave back %d assignments of the task after the partition", n)
	}
	NothingLeft(t, a.Node)
}
