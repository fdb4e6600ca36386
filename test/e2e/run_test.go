package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestRunPrintsOutputAndExitsWithTheTasksCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if string(r.stdout) != "out\n" {
		t.Fatalf("stdout %q, want exactly %q", r.stdout, "out\n")
	}
	if !bytes.Contains(r.stderr, []byte("err\n")) {
		t.Fatalf("stderr %q does not contain the task's stderr", r.stderr)
	}
	if r.code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	id := r.taskID(t)
	if tk := e.task(id); tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != 3 {
		t.Fatalf("task %v, want failed with exit code 3", tk)
	}
	if cs := containersOf(t, id); len(cs) != 0 {
		t.Fatalf("the task's container is still there: %v", cs[0].Names)
	}
}

// podium run's docker-style flags reach the task on a real node: its env
// (-e), working directory (-w) and memory limit (-m, in Docker's units), and
// its name, by which podium tasks --name finds it and which task get shows.
func TestRunWithDockerFlagsAndAName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--name", "unit-tests", "-e", "GREETING=hello", "-w", "/tmp", "-m", "64m", "--image", e.image, "--",
		"sh", "-c", `echo "$GREETING from $(pwd)"; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes`)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, tail(r.stderr))
	}
	if want := "hello from /tmp\n67108864\n"; string(r.stdout) != want {
		t.Fatalf("stdout %q, want %q (the env, the working directory and a 64 MiB memory limit)", r.stdout, want)
	}
	id := r.taskID(t)
	other := e.podium("run", "--image", e.image, "--", "true")
	if other.code != 0 {
		t.Fatalf("an unnamed task: exit %d; stderr:\n%s", other.code, tail(other.stderr))
	}
	list := e.podium("tasks", "--name", "unit-tests")
	lines := strings.Split(strings.TrimSpace(string(list.stdout)), "\n")
	if list.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "NAME") ||
		!strings.HasPrefix(lines[1], id) || !strings.Contains(lines[1], " unit-tests ") {
		t.Fatalf("podium tasks --name unit-tests (exit %d) printed:\n%s\nwant a header and one row, task %s named unit-tests", list.code, list.stdout, id)
	}
	get := e.podium("task", "get", id)
	if !strings.Contains(string(get.stdout), "name:") || !strings.Contains(string(get.stdout), "unit-tests") {
		t.Fatalf("podium task get %s does not show the name:\n%s", id, get.stdout)
	}
}

// 5 MB of random bytes and text: what podium run prints is what the task
// wrote, and podium logs prints the same bytes afterwards.
func TestBinaryOutputIsByteExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	script := "(head -c 2600000 /dev/urandom; seq 1 60000; head -c 2400000 /dev/urandom; printf 'no newline at the end') > /out; " +
		"cat /out; sha256sum /out >&2"
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, tail(r.stderr))
	}
	sum := sha256.Sum256(r.stdout)
	got := hex.EncodeToString(sum[:])
	if !bytes.Contains(r.stderr, []byte(got)) {
		t.Fatalf("podium run printed %d bytes with SHA-256 %s; the task's own sha256sum says otherwise:\n%s",
			len(r.stdout), got, tail(r.stderr))
	}
	if len(r.stdout) < 5_000_000 {
		t.Fatalf("only %d bytes arrived", len(r.stdout))
	}
	logs := e.podium("logs", r.taskID(t))
	if logs.code != 0 || !bytes.Equal(logs.stdout, r.stdout) {
		t.Fatalf("podium logs printed %d bytes (exit %d), differing from the %d podium run printed", len(logs.stdout), logs.code, len(r.stdout))
	}
}

func TestTwentyThousandLinesArriveCompleteAndInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--image", e.image, "--", "seq", "1", "20000")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, tail(r.stderr))
	}
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if string(r.stdout) != want.String() {
		t.Fatalf("stdout is %d bytes, want the %d bytes of seq 1 20000", len(r.stdout), want.Len())
	}
}

func TestCancelEndsTheTaskAndTheFollowingCLIExits130(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cmd := e.podiumCmd("run", "--image", e.image, "--", "sleep", "600")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	coordtest.Eventually(t, 30*time.Second, "the task to be running", func() bool {
		m := taskIDRe.FindString(errb.String())
		if m == "" {
			return false
		}
		id = m
		return e.task(id).State == podiumv1.TaskState_TASK_STATE_RUNNING
	})
	start := time.Now()
	if c := e.podium("task", "cancel", id); c.code != 0 {
		t.Fatalf("podium task cancel: exit %d\n%s", c.code, c.stderr)
	}
	err := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != 130 {
		t.Fatalf("the following podium run exited %d (%v), want 130; stderr:\n%s", code, err, errb.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("cancel took %s, longer than the grace period", d)
	}
	if s := e.task(id).State; s != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("task is %v, want cancelled", s)
	}
	if cs := containersOf(t, id); len(cs) != 0 {
		t.Fatalf("the cancelled task's container is still there: %v", cs[0].Names)
	}
}

func TestMissingImageFailsWithItsNameAnd125(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--image", "podium-test/does-not-exist:1", "--", "true")
	if r.code != 125 {
		t.Fatalf("exit %d, want 125; stderr:\n%s", r.code, r.stderr)
	}
	if !bytes.Contains(r.stderr, []byte("podium-test/does-not-exist:1")) {
		t.Fatalf("stderr does not name the image:\n%s", r.stderr)
	}
	tk := e.task(r.taskID(t))
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(tk.Reason, "podium-test/does-not-exist:1") {
		t.Fatalf("task %v, want failed with a reason naming the image", tk)
	}
}

// Input the CLI refuses never reaches the coordinator: nothing is stored.
func TestRefusedInputStoresNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(spec, []byte("image: "+e.image+"\ncomand: [true]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"unknown key": {"run", "--spec", spec},
		"no image":    {"run", "--", "true"},
		"env":         {"run", "--image", e.image, "--env", "NOEQUALS", "--", "true"},
	}
	for name, args := range cases {
		r := e.podium(args...)
		if r.code != 125 {
			t.Errorf("%s: exit %d, want 125; stderr:\n%s", name, r.code, r.stderr)
		}
	}
	if r := e.podium("tasks", "--json"); r.code != 0 || strings.Contains(string(r.stdout), "task_") {
		t.Fatalf("refused input stored a task: %s", r.stdout)
	}
	bad := e.podiumCmd("tasks")
	bad.Env = append(bad.Env, "PODIUM_TOKEN=wrong")
	out, _ := bad.CombinedOutput()
	if bad.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "token") {
		t.Fatalf("a wrong token: exit %d\n%s", bad.ProcessState.ExitCode(), out)
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
