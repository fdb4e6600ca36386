package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TestFullDataDiskFailsTheTaskAndTheNodeGoesOn: an agent whose data
// directory is a 20 MiB disk runs a task printing 100 MB. The disk fills;
// the task is held and then, the disk still full after --disk-full-after,
// stopped: it fails with the reason "node disk full" (not a timeout, and no
// hang), notes in its log say so as it happens, `podium run` exits 125, and the stored
// output is an exact prefix of what the task printed. Its directory goes,
// and the next task on the node runs.
func TestFullDataDiskFailsTheTaskAndTheNodeGoesOn(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, "size=20m,mode=0700"); err != nil {
		t.Fatalf("mount a 20 MiB tmpfs for the agent's data directory (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(data, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the agent's data directory: %v", err)
		}
	})
	e := newEnvIn(t, data, coordtest.Options{}, nil, []string{"--disk-full-after", "3s"})

	const total = 100_000_000
	// The spec's timeout is only there so that a task that hangs (the
	// defect) ends the test, with the reason "timeout", instead of holding
	// it forever.
	r := e.podium("run", "--image", e.image, "--timeout", "3m", "--", "sh", "-c", "yes 0123456789abcdef | head -c 100000000")
	id := r.taskID(t)
	tk := e.task(id)
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.GetReason(), "node disk full") || tk.ExitCode != nil {
		t.Fatalf("task %s ended %s with reason %q (has an exit code: %t, %d); want failed, reason \"node disk full…\", no exit code",
			id, tk.State, tk.GetReason(), tk.ExitCode != nil, tk.GetExitCode())
	}
	if r.code != 125 || !bytes.Contains(r.stderr, []byte("node disk full")) {
		t.Fatalf("podium run exited %d, want 125 (the node failed, not the task); stderr:\n%s", r.code, r.stderr)
	}
	logs := e.podium("logs", id)
	if n := len(logs.stdout); n == 0 || n >= total || !bytes.Equal(logs.stdout, pattern(n)) {
		t.Fatalf("the stored stdout has %d bytes; want a non-empty exact prefix of the %d the task printed", n, total)
	}
	// Someone following the task learns why its output stalled when it
	// does, and why it ended.
	held := bytes.Index(logs.stderr, []byte("→ the node's disk is full ("))
	ended := bytes.Index(logs.stderr, []byte("→ node disk full: "))
	if held < 0 || ended < held {
		t.Fatalf("the task's log lacks a note that its output waits for room on the node's disk, "+
			"then one that it was stopped for it; its stderr:\n%s", logs.stderr)
	}
	// The finished attempt's directory, and with it the runner log that
	// filled the disk, goes once its status is stored.
	tasks := filepath.Join(data, "tasks")
	coordtest.Eventually(t, 30*time.Second, "the finished attempt's directory to be removed from the agent's data directory", func() bool {
		entries, err := os.ReadDir(tasks)
		return err == nil && len(entries) == 0
	})
	next := e.podium("run", "--image", e.image, "--", "sh", "-c", "echo the next task ran")
	if next.code != 0 || string(next.stdout) != "the next task ran\n" {
		t.Fatalf("the next task: exit %d, stdout %q; stderr:\n%s", next.code, next.stdout, next.stderr)
	}
}
