package faults

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/podiumhq/podium/internal/testenv/dockertest"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
	"github.com/podiumhq/podium/internal/testenv/wait"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
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
	a.Args = []string{"--disk-full-after", "3s"}
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
	held := strings.Index(logs.Stderr(), "→ the node's disk is full (")
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
