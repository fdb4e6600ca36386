package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// pattern is what `yes 0123456789abcdef` prints, n bytes of it.
func pattern(n int) []byte {
	return bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
}

// TestOutputLimitStoresExactlyTheLimitAndANote: a task printing twice its
// output limit has exactly the first limit's worth of its output stored, one
// note saying the rest was dropped, and its own exit code.
func TestOutputLimitStoresExactlyTheLimitAndANote(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const limit = 1 << 20
	r := e.podium("run", "--output-limit", "1MiB", "--image", e.image, "--",
		"sh", "-c", fmt.Sprintf("yes 0123456789abcdef | head -c %d; echo after the limit >&2; exit 3", 2*limit))
	if r.code != 3 {
		t.Fatalf("podium run exited %d, want the task's own 3; stderr:\n%s", r.code, r.stderr)
	}
	if !bytes.Equal(r.stdout, pattern(limit)) {
		t.Fatalf("podium run printed %d bytes, want exactly the first %d the task printed", len(r.stdout), limit)
	}
	id := r.taskID(t)
	logs := e.podium("logs", id)
	if !bytes.Equal(logs.stdout, pattern(limit)) {
		t.Fatalf("the stored stdout has %d bytes, want exactly the first %d the task printed", len(logs.stdout), limit)
	}
	const note = "→ output limit of 1 MiB reached: further output of this attempt is dropped\n"
	if strings.Count(string(logs.stderr), note) != 1 || strings.Contains(string(logs.stderr), "after the limit") {
		t.Fatalf("the stored log's stderr, want the note once and nothing past the limit:\n%s", logs.stderr)
	}
	if tk := e.task(id); tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != 3 {
		t.Fatalf("task %v, want failed with its exit code 3", tk)
	}
}

// procStatusKB reads a field of /proc/PID/status, in kB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if st, err := d.Info(); err == nil {
				n += st.Size()
			}
		}
		return nil
	})
	return n
}

// TestOutputFloodWithTheCoordinatorDownIsBounded: a task and its sidecar
// both running `yes` while the coordinator is down. Nothing can be shipped,
// so the agent holds the output back instead of keeping it: its memory stays
// under its bound (--pending-memory) and 64 MiB more, the spool under its own
// (--pending-disk), and the runner logs under the attempt's output limit.
// When the coordinator is back the task is cancelled and ends as usual.
//
// The trial the issue describes runs for 60 s with the default bounds; the
// test watches for 15 s with small ones, which shows the same (with nothing
// held back, memory and disk grow by tens of MiB a second) in CI time.
func TestOutputFloodWithTheCoordinatorDownIsBounded(t *testing.T) {
	t.Parallel()
	const pendingMemory, pendingDisk, outputLimit = 16 << 20, 32 << 20, 64 << 20
	e := newEnvWith(t, []string{"--pending-memory", "16MiB", "--pending-disk", "32MiB"})
	spec := e.specFile(fmt.Sprintf(`image: %[1]s
command: [yes, task]
output_limit: 64MiB
sidecars:
  - name: noisy
    image: %[1]s
    command: [yes]
`, e.image))
	r := e.podium("run", "--detach", "--spec", spec)
	if r.code != 0 {
		t.Fatalf("podium run --detach: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	coordtest.Eventually(t, 60*time.Second, "the task to run", func() bool {
		return e.task(id).State == podiumv1.TaskState_TASK_STATE_RUNNING
	})
	e.r.Stop()
	pid := e.agent.Process.Pid
	var rss, spool, tasks int64
	// Sampled twice a second: this measures for a while, it waits for
	// nothing.
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(500 * time.Millisecond) {
		rss = max(rss, procStatusKB(t, pid, "VmRSS")<<10)
		spool = max(spool, dirBytes(filepath.Join(e.data, "spool")))
		tasks = max(tasks, dirBytes(filepath.Join(e.data, "tasks")))
	}
	hwm := procStatusKB(t, pid, "VmHWM") << 10
	t.Logf("with the coordinator down for 15 s: agent RSS at most %d MiB (peak %d MiB), spool %d MiB, runner logs %d MiB",
		rss>>20, hwm>>20, spool>>20, tasks>>20)
	if rss > pendingMemory+64<<20 {
		t.Errorf("the agent's RSS reached %d MiB; want under its --pending-memory of %d MiB and 64 MiB more", rss>>20, pendingMemory>>20)
	}
	// One event may go over: the spool is checked before each.
	if spool > pendingDisk+1<<20 {
		t.Errorf("the spool reached %d MiB; want it under its --pending-disk of %d MiB", spool>>20, pendingDisk>>20)
	}
	if tasks > 2*(outputLimit+1<<20) {
		t.Errorf("the runner logs reached %d MiB; want each under the output limit of %d MiB", tasks>>20, outputLimit>>20)
	}

	e.replaceCoordinator()
	if c := e.podium("task", "cancel", id); c.code != 0 {
		t.Fatalf("podium task cancel: exit %d\n%s", c.code, c.stderr)
	}
	coordtest.Eventually(t, 120*time.Second, "the task to end cancelled", func() bool {
		return e.task(id).State == podiumv1.TaskState_TASK_STATE_CANCELLED
	})
}
