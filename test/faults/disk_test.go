package faults

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// onSmallDisk moves an enrolled agent's data directory (its identity) onto a
// tmpfs of size (e.g. "20m") the test mounts, and unmounts when it ends,
// after the agent stops: a data disk that fills for real.
func onSmallDisk(t *testing.T, a *Agent, size string) {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mount a %s tmpfs for the agent's data directory (the test needs root): %v", size, err)
	}
	t.Cleanup(func() {
		a.Stop() // before its disk goes; stopping it again later does nothing
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the agent's data directory: %v", err)
		}
	})
	if err := os.CopyFS(dir, os.DirFS(a.DataDir)); err != nil {
		t.Fatalf("copy the enrolled data directory onto the small disk: %v", err)
	}
	a.DataDir = dir
}

// pattern is what `yes 0123456789abcdef` prints, n bytes of it.
func pattern(n int) []byte {
	return bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
}

// TestFullDataDisk (defect 3): an agent whose data directory is a 20 MiB
// disk runs a task printing 100 MB. The disk fills; the task is held, a
// note says why, and, the disk still full after --disk-full-after, it is
// stopped: it fails with the reason "node disk full" (not a timeout, and no
// hang), another note says so, `podium run` exits 125 (the node failed, not
// the task), and the stored output is an exact prefix of what the task
// printed. Its directory goes, the next task on the node runs, and nothing
// is left in Docker.
func TestFullDataDisk(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	a := EnrollAgent(t, r, r.URL())
	onSmallDisk(t, a, "20m")
	// A floor under the small disk's size: the default (1 GiB) would keep
	// the node from taking any task.
	a.Args = []string{"--disk-full-after", "3s", "--min-free-disk-mb", "4"}
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	const total = 100_000_000
	// The spec's timeout only ends a task that hangs (the defect) with the
	// reason "timeout", so the row fails rather than waits forever.
	run := StartRun(t, []string{r.URL()}, "--image", dockertest.EnsureImage(t), "--timeout", "2m", "--",
		"sh", "-c", "yes 0123456789abcdef | head -c 100000000")
	code := run.Wait(t)
	id := run.TaskID(t)
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.GetReason(), "node disk full") || tk.ExitCode != nil {
		t.Fatalf("task %s ended %s with reason %q (has an exit code: %t, %d); want failed, reason \"node disk full…\", no exit code",
			id, tk.State, tk.GetReason(), tk.ExitCode != nil, tk.GetExitCode())
	}
	if code != 125 || !strings.Contains(run.Stderr(), "node disk full") {
		t.Fatalf("podium run exited %d, want 125 (the node failed, not the task); stderr:\n%s", code, run.Stderr())
	}
	stdout, _ := r.StoredOutput(t, id)
	if n := len(stdout); n == 0 || n >= total || !bytes.Equal(stdout, pattern(n)) {
		t.Fatalf("the stored stdout has %d bytes; want a non-empty exact prefix of the %d the task printed", n, total)
	}
	if n := len(run.Stdout()); !bytes.Equal(run.Stdout(), stdout) {
		t.Fatalf("podium run printed %d bytes, not the %d stored", n, len(stdout))
	}
	logs := StartPodium(t, []string{r.URL()}, "logs", id)
	logs.Wait(t)
	held := strings.Index(logs.Stderr(), "→ paused: node disk full since ")
	ended := strings.Index(logs.Stderr(), "→ node disk full: ")
	if held < 0 || ended < held {
		t.Fatalf("the task's log lacks a note that its output waits for room on the node's disk, "+
			"then one that it was stopped for it; podium logs printed on stderr:\n%s", logs.Stderr())
	}
	// The finished attempt's directory, with the runner log that filled
	// the disk, goes once its status is stored.
	tasks := filepath.Join(a.DataDir, "tasks")
	wait.For(t, nodeWithin, "the finished attempt's directory to be removed from the agent's data directory", func() bool {
		entries, err := os.ReadDir(tasks)
		return err == nil && len(entries) == 0
	})
	next := StartRun(t, []string{r.URL()}, "--image", dockertest.EnsureImage(t), "--", "sh", "-c", "echo the next task ran")
	if code := next.Wait(t); code != 0 || string(next.Stdout()) != "the next task ran\n" {
		t.Fatalf("the next task: exit %d, stdout %q; stderr:\n%s", code, next.Stdout(), next.Stderr())
	}
	NothingLeft(t, a.Node)
}

// TestFullDiskNodeTakesNoWork (issue 29: a full data disk made its node a
// black hole, failing every task it was given with "no space left on
// device"). Two nodes: "small" keeps its data directory on a 20 MiB disk
// with a free-space floor of 8 MiB (--min-free-disk-mb), the other on the
// host's. A task pinned to small prints 168 MB and fills its disk. While it
// waits for room: the node reports that it is below its floor (`podium node
// get`); a task only small may run waits queued, its reason (`podium task
// get`) naming the floor, rather than failing there; tasks any node may run
// run on the other one; and the flooding task's log says it is paused since
// when and when it fails. Then the flooding task fails "node disk full" as
// before, its attempt's directory goes (the disk is free again), and the
// waiting task runs on small and succeeds.
func TestFullDiskNodeTakesNoWork(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	small := EnrollAgent(t, r, r.URL())
	onSmallDisk(t, small, "20m")
	small.Args = []string{"--disk-full-after", "90s", "--min-free-disk-mb", "8"}
	small.Start()
	other := EnrollAgent(t, r, r.URL())
	other.Start()
	r.WaitNode(t, small.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	r.WaitNode(t, other.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	if _, err := r.Admin().SetNodeLabels(context.Background(), connect.NewRequest(&podiumv1.SetNodeLabelsRequest{
		NodeId: small.Node, Add: []string{"disk=small"}})); err != nil {
		t.Fatalf("label the small node: %v", err)
	}
	img := dockertest.EnsureImage(t)

	flood := StartRun(t, []string{r.URL()}, "--label", "disk=small", "--image", img, "--timeout", "5m", "--",
		"sh", "-c", "yes 0123456789abcdef | head -c 168000000")
	floodID := flood.TaskID(t)
	// Once the flooding task's output is held (a note says the disk is
	// full), what the disk has free stays put: before, the agent's spool
	// still frees room now and then as the coordinator stores what it holds.
	follow := StartPodium(t, []string{r.URL()}, "logs", "-f", floodID)
	wait.For(t, runWithin, "a note in the flooding task's log that the small node's disk is full", func() bool {
		return fullNoteRe.MatchString(follow.Stderr())
	})
	// The node says why it takes nothing new. (Waited for before the next
	// tasks: the spool's last room goes a moment after the note.)
	wait.For(t, nodeWithin, "podium node get to say the small node is below its free-space floor", func() bool {
		get := StartPodium(t, []string{r.URL()}, "node", "get", small.Node)
		get.Wait(t)
		return strings.Contains(string(get.Stdout()), "below its free-space floor")
	})

	pinned := StartRun(t, []string{r.URL()}, "--label", "disk=small", "--image", img, "--", "echo", "next-runs")
	elsewhere := make([]*Run, 2)
	for i := range elsewhere {
		elsewhere[i] = StartRun(t, []string{r.URL()}, "--image", img, "--", "echo", "elsewhere")
	}
	pinnedID := pinned.TaskID(t)

	// What holds only while the disk is full comes first: the flooding task
	// fails --disk-full-after (90s) after its output found no room.
	waitQueuedWhy(t, r, pinnedID, "the full node", "free-space floor")
	// The flooding task's log says it is paused, since when, and until when.
	if !pausedRe.MatchString(follow.Stderr()) {
		t.Fatalf("the flooding task's log does not say it is paused, since when and until when; podium logs -f printed on stderr:\n%s",
			follow.Stderr())
	}
	if tk := r.Task(t, floodID); tk.State != podiumv1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("the flooding task is %s (%q) once its note says it is paused; want running", tk.State, tk.GetReason())
	}

	// Tasks any node may run run on the other one.
	for i, run := range elsewhere {
		id := run.TaskID(t)
		if code := run.Wait(t); code != 0 || string(run.Stdout()) != "elsewhere\n" {
			t.Fatalf("task %d (%s), which any node may run: exit %d, stdout %q; stderr:\n%s", i, id, code, run.Stdout(), run.Stderr())
		}
		if n := r.Task(t, id).GetNodeId(); n != other.Node {
			t.Fatalf("task %s ran on node %s, want the node with room, %s", id, n, other.Node)
		}
	}

	// It fails as before; its attempt's data goes, and the pinned task runs.
	if code := flood.Wait(t); code != 125 {
		t.Fatalf("podium run of the flooding task exited %d, want 125; stderr:\n%s", code, flood.Stderr())
	}
	if tk := r.Task(t, floodID); tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.GetReason(), "node disk full") {
		t.Fatalf("the flooding task ended %s (%q), want failed, \"node disk full…\"", tk.State, tk.GetReason())
	}
	tasks := filepath.Join(small.DataDir, "tasks")
	wait.For(t, nodeWithin, "the flooding attempt's directory to be removed from the small node's data directory", func() bool {
		entries, err := os.ReadDir(tasks)
		if err != nil {
			return false
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), floodID) {
				return false
			}
		}
		return true
	})
	follow.Wait(t)
	if code := pinned.Wait(t); code != 0 || string(pinned.Stdout()) != "next-runs\n" {
		t.Fatalf("the task pinned to the small node: exit %d, stdout %q; stderr:\n%s", code, pinned.Stdout(), pinned.Stderr())
	}
	if n := r.Task(t, pinnedID).GetNodeId(); n != small.Node {
		t.Fatalf("the pinned task ran on %s, want %s", n, small.Node)
	}
	NothingLeft(t, small.Node)
	NothingLeft(t, other.Node)
}

// pausedRe is the note of a task whose output waits for room on its node's
// disk: when that began and when the task fails unless room comes.
var pausedRe = regexp.MustCompile(`paused: node disk full since \S+; fails at \S+ unless space frees`)

// fullNoteRe is any note that the node's disk is full, in the words of this
// version (pausedRe) or of the one before it.
var fullNoteRe = regexp.MustCompile(`→ (paused: node disk full since |the node's disk is full \()`)

// TestNodeDiskFullRetriedElsewhere (issue 29): a task its node failed
// because the node's disk filled is the node's trouble, not the task's:
// under retry_on_node_loss with an attempt left it goes back to the queue
// and runs on a node with room. "small" (a 20 MiB data disk, 4 MiB floor,
// --disk-full-after 3s) is the only node taking work when a task printing 40
// MB is submitted; the other is then undrained. The first attempt fails on
// small with "node disk full"; the task's log says the next attempt comes
// because its node failed it, and attempt 2 succeeds on the other node.
func TestNodeDiskFullRetriedElsewhere(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL)
	small := EnrollAgent(t, r, r.URL())
	onSmallDisk(t, small, "20m")
	small.Args = []string{"--disk-full-after", "3s", "--min-free-disk-mb", "4"}
	small.Start()
	other := EnrollAgent(t, r, r.URL())
	other.Start()
	r.WaitNode(t, small.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	r.WaitNode(t, other.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	drain := func(draining bool) {
		t.Helper()
		if _, err := r.Admin().DrainNode(context.Background(), connect.NewRequest(&podiumv1.DrainNodeRequest{
			NodeId: other.Node, Draining: draining})); err != nil {
			t.Fatalf("drain %t the other node: %v", draining, err)
		}
	}
	drain(true)

	spec := filepath.Join(t.TempDir(), "flood.yaml")
	if err := os.WriteFile(spec, []byte("image: "+dockertest.EnsureImage(t)+"\n"+
		"command: [sh, -c, 'yes 0123456789abcdef | head -c 40000000']\n"+
		"timeout: 3m\nmax_attempts: 2\nretry_on_node_loss: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := StartRun(t, []string{r.URL()}, "--spec", spec)
	id := run.TaskID(t)
	wait.For(t, runWithin, "the task's first attempt to be given to the small node", func() bool {
		tk := r.Task(t, id)
		if tk.GetAttempt() > 1 {
			t.Fatalf("task %s is on attempt %d (%s, %q) before its first was seen on the small node", id, tk.GetAttempt(), tk.State, tk.GetReason())
		}
		return tk.GetNodeId() == small.Node
	})
	drain(false)
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d, want 0 (the second attempt, on a node with room, succeeds); stderr:\n%s", code, run.Stderr())
	}
	tk := r.Task(t, id)
	if tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.GetAttempt() != 2 || tk.GetNodeId() != other.Node {
		t.Fatalf("task %s ended %s (%q) on attempt %d on node %s; want succeeded on attempt 2 on %s",
			id, tk.State, tk.GetReason(), tk.GetAttempt(), tk.GetNodeId(), other.Node)
	}
	logs := StartPodium(t, []string{r.URL()}, "logs", id)
	logs.Wait(t)
	if !strings.Contains(logs.Stderr(), "attempt 2 of 2 after its node failed it (node disk full") {
		t.Fatalf("the task's log does not say why attempt 2 came; podium logs printed on stderr:\n%s", lastLines(logs.Stderr(), 30))
	}
	NothingLeft(t, small.Node)
	NothingLeft(t, other.Node)
}

// waitQueuedWhy waits for a task only one node may run to wait queued while
// that node cannot take work, its reason containing why, and checks that
// `podium task get` shows that reason; the task failing or running there
// meanwhile fails the test at once. node names the node for the messages.
func waitQueuedWhy(t *testing.T, r *Replica, id, node, why string) {
	t.Helper()
	wait.For(t, nodeWithin, "the task only "+node+" may run to wait queued, its reason naming "+why, func() bool {
		tk := r.Task(t, id)
		switch tk.State {
		case podiumv1.TaskState_TASK_STATE_FAILED:
			t.Fatalf("the task pinned to %s failed there (%q) rather than waiting", node, tk.GetReason())
		case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_RUNNING:
			t.Fatalf("the task pinned to %s is %s on %s: the node took it while it could not take work", node, tk.State, tk.GetNodeId())
		}
		return tk.State == podiumv1.TaskState_TASK_STATE_QUEUED && strings.Contains(tk.GetReason(), why)
	})
	get := StartPodium(t, []string{r.URL()}, "task", "get", id)
	if code := get.Wait(t); code != 0 || !strings.Contains(string(get.Stdout()), why) {
		t.Fatalf("podium task get %s (exit %d) does not show why it waits; stdout:\n%s", id, code, get.Stdout())
	}
}
