package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// following is a `podium run` in progress.
type following struct {
	cmd         *exec.Cmd
	out, stderr *syncBuffer
	done        chan struct{}
}

func (e *env) follow(args ...string) *following {
	e.t.Helper()
	return e.followEnv(nil, args...)
}

// followEnv is follow with env added to podium's environment.
func (e *env) followEnv(env []string, args ...string) *following {
	e.t.Helper()
	f := &following{cmd: e.podiumCmd(append([]string{"run"}, args...)...), out: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	f.cmd.Env = append(f.cmd.Env, env...)
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.stderr
	if err := f.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	e.t.Cleanup(func() {
		select {
		case <-f.done:
		default:
			_ = f.cmd.Process.Kill()
			<-f.done
		}
	})
	return f
}

// waitStdout waits until the task's output, as podium run prints it,
// contains s.
func (f *following) waitStdout(t *testing.T, s string) {
	t.Helper()
	coordtest.Eventually(t, 30*time.Second, fmt.Sprintf("%q in the output", s), func() bool {
		return strings.Contains(f.out.String(), s)
	})
}

func (f *following) id(t *testing.T) string {
	t.Helper()
	var id string
	coordtest.Eventually(t, 30*time.Second, "the task id", func() bool {
		id = taskIDRe.FindString(f.stderr.String())
		return id != ""
	})
	return id
}

// wait waits for podium run to exit and returns its exit code.
func (f *following) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("podium run did not end; stderr:\n%s", f.stderr.String())
	}
	return f.cmd.ProcessState.ExitCode()
}

const slowCount = 30

// slowScript prints 1..30, one line every 0.2 s.
var slowScript = fmt.Sprintf("for i in $(seq 1 %d); do echo $i; sleep 0.2; done", slowCount)

func slowWant() string {
	var b strings.Builder
	for i := 1; i <= slowCount; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// checkSlowTask checks what a user sees of a task that ran slowScript
// across a disruption: it succeeded, and its stored log holds every line
// once, in order.
func (e *env) checkSlowTask(t *testing.T, f *following) {
	t.Helper()
	id := f.id(t)
	if code := f.wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, f.stderr.String())
	}
	if got := f.out.String(); got != slowWant() {
		t.Fatalf("podium run printed %q, want 1..%d once each", got, slowCount)
	}
	logs := e.podium("logs", id)
	if string(logs.stdout) != slowWant() {
		t.Fatalf("podium logs printed %q, want 1..%d once each", logs.stdout, slowCount)
	}
	if tk := e.task(id); tk.State != podiumv1.TaskState_TASK_STATE_SUCCEEDED || tk.GetExitCode() != 0 {
		t.Fatalf("task %v, want succeeded", tk)
	}
}

// TestAgentKilledMidTaskLosesNothing kills the agent with SIGKILL while a
// task prints: the task goes on without it (it is not the agent's child), and
// the restarted agent resumes its output at the exact byte.
func TestAgentKilledMidTaskLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.follow("--image", e.image, "--", "sh", "-c", slowScript)
	f.waitStdout(t, "\n5\n")
	e.killAgent()
	// The scenario: the task goes on printing for a while with no agent (about
	// five of its lines), which the next agent must pick up at the exact byte.
	time.Sleep(time.Second)
	e.startAgent()
	e.checkSlowTask(t, f)
}

// TestCoordinatorReplacedMidTaskLosesNothing stops the coordinator replica in
// the middle of a task and starts a new one on the same database: the agent
// keeps its unacknowledged events (on disk) and sends them to the new one
// from where it says it stands.
func TestCoordinatorReplacedMidTaskLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.follow("--image", e.image, "--", "sh", "-c", slowScript)
	f.waitStdout(t, "\n5\n")
	e.replaceCoordinator()
	e.checkSlowTask(t, f)
}

func (e *env) specFile(body string) string {
	e.t.Helper()
	p := filepath.Join(e.t.TempDir(), "task.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func TestSidecarIsReachedByName(t *testing.T) {
	t.Parallel()
	// The agent with its shipped default of two task networks made ahead
	// (--network-pool 2), which the other tests here turn off.
	e := newEnvWith(t, []string{"--network-pool", "2"})
	spec := e.specFile(fmt.Sprintf(`image: %[1]s
command: [sh, -c, 'wget -qO- http://web:8080/index.html']
sidecars:
  - name: web
    image: %[1]s
    command: [sh, -c, 'mkdir -p /www && echo hello from web > /www/index.html && echo web is up && exec httpd -f -p 8080 -h /www']
    readiness:
      http_path: /index.html
      http_port: 8080
      timeout: 20s
`, e.image))
	r := e.podium("run", "--spec", spec)
	if r.code != 0 || string(r.stdout) != "hello from web\n" {
		t.Fatalf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// The sidecar's output is in the task's log, marked with its name.
	if !strings.Contains(string(r.stderr), "→ [web] web is up") {
		t.Fatalf("the sidecar's output is not in the log:\n%s", r.stderr)
	}
}

func TestSidecarNeverReadyFailsTheTaskWithItsOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.specFile(fmt.Sprintf(`image: %[1]s
command: [echo, must not run]
sidecars:
  - name: db
    image: %[1]s
    command: [sh, -c, 'echo starting db; echo "FATAL: database files are incompatible" >&2; sleep 600']
    readiness:
      tcp_port: 5432
      timeout: 2s
`, e.image))
	r := e.podium("run", "--spec", spec)
	tk := e.task(r.taskID(t))
	if r.code != 125 || tk.State != podiumv1.TaskState_TASK_STATE_FAILED ||
		!strings.Contains(tk.Reason, `sidecar "db" did not become ready`) || !strings.Contains(tk.Reason, "[db] FATAL: database files are incompatible") {
		t.Fatalf("exit %d, task %v; want failed with the sidecar's last output in the reason", r.code, tk)
	}
	if strings.Contains(string(r.stdout), "must not run") {
		t.Fatal("the task ran although its sidecar never became ready")
	}
}

func TestOutOfMemoryIsReportedAsOOM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.specFile(fmt.Sprintf(`image: %s
command: [sh, -c, 'head -c 300m /dev/zero | tail']
resources:
  memory_mb: 64
`, e.image))
	r := e.podium("run", "--spec", spec)
	tk := e.task(r.taskID(t))
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(tk.Reason, "oom") {
		t.Fatalf("task %v, want failed with reason oom", tk)
	}
	if r.code == 0 {
		t.Fatal("podium run exited 0 for a task killed for memory")
	}
}

func TestTimeoutFailsTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--image", e.image, "--timeout", "1s", "--", "sleep", "60")
	tk := e.task(r.taskID(t))
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.Reason != "timeout" {
		t.Fatalf("task %v, want failed/timeout", tk)
	}
}

// TestCancelKillsATaskThatIgnoresSIGTERM: SIGTERM first, SIGKILL once the
// task's grace period is over.
func TestCancelKillsATaskThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.specFile(fmt.Sprintf(`image: %s
command: [sh, -c, "trap '' TERM; echo ready; while true; do sleep 0.1; done"]
cancel_grace: 2s
`, e.image))
	f := e.follow("--spec", spec)
	f.waitStdout(t, "ready\n")
	id := f.id(t)
	start := time.Now()
	if c := e.podium("task", "cancel", id); c.code != 0 {
		t.Fatalf("podium task cancel: exit %d\n%s", c.code, c.stderr)
	}
	if code := f.wait(t); code != 130 {
		t.Fatalf("podium run exited %d, want 130; stderr:\n%s", code, f.stderr.String())
	}
	took := time.Since(start)
	tk := e.task(id)
	if tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED || tk.GetSignal() != 9 {
		t.Fatalf("task %v, want cancelled by SIGKILL", tk)
	}
	if took < 2*time.Second || took > 20*time.Second {
		t.Fatalf("the task was killed %s after the cancel; want after its 2 s grace", took)
	}
}

// TestMessagesAreReadInOrder: two `podium task send` messages, read by the
// task with `podium-runner ask`, in the order they were sent.
func TestMessagesAreReadInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.follow("--image", e.image, "--", "sh", "-c", "echo waiting; podium-runner ask; podium-runner ask")
	f.waitStdout(t, "waiting\n")
	id := f.id(t)
	for _, m := range []string{"first message", "second message"} {
		if r := e.podium("task", "send", id, m); r.code != 0 {
			t.Fatalf("podium task send: exit %d\n%s", r.code, r.stderr)
		}
	}
	if code := f.wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, f.stderr.String())
	}
	if got := f.out.String(); got != "waiting\nfirst message\nsecond message\n" {
		t.Fatalf("the task printed %q", got)
	}
}

// TestExitOnDrain: an agent started with --exit-on-drain exits 0 once its
// node is drained and its last task has ended, and not before.
func TestExitOnDrain(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, []string{"--exit-on-drain"})
	f := e.follow("--image", e.image, "--", "sh", "-c", "echo started; sleep 2; echo finished")
	f.waitStdout(t, "started\n")
	if r := e.podium("node", "drain", e.node); r.code != 0 {
		t.Fatalf("podium node drain: exit %d\n%s", r.code, r.stderr)
	}
	// That the agent does not exit early can only be seen by giving it the
	// time to: half a second of the task's two.
	select {
	case <-e.agentDone:
		t.Fatal("the agent exited while its task was still running")
	case <-time.After(500 * time.Millisecond):
	}
	if code := f.wait(t); code != 0 || f.out.String() != "started\nfinished\n" {
		t.Fatalf("podium run exited %d, printed %q", code, f.out.String())
	}
	select {
	case <-e.agentDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit after its node was drained and its task ended")
	}
	if code := e.agent.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the agent exited %d, want 0", code)
	}
	e.agent = nil
}

// TestTaskThatEndsWhileTheAgentIsDownIsReported: the task finishes while its
// agent is dead; the restarted agent finds its exit status in the runner log
// and reports it, with the output that came after the crash.
func TestTaskThatEndsWhileTheAgentIsDownIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.follow("--image", e.image, "--", "sh", "-c", "echo before; sleep 1; echo after; exit 3")
	f.waitStdout(t, "before\n")
	e.killAgent()
	id := f.id(t)
	e.waitContainerExit(id) // the task ends in the meantime
	e.startAgent()
	if code := f.wait(t); code != 3 {
		t.Fatalf("podium run exited %d, want the task's 3; stderr:\n%s", code, f.stderr.String())
	}
	if got := f.out.String(); got != "before\nafter\n" {
		t.Fatalf("podium run printed %q", got)
	}
	if tk := e.task(id); tk.State != podiumv1.TaskState_TASK_STATE_FAILED || tk.GetExitCode() != 3 {
		t.Fatalf("task %v, want failed with exit code 3", tk)
	}
}

// waitContainerExit waits, through the Docker API, for the container of the
// task's first attempt to exit: with the agent down, nothing else can say
// the task has ended.
func (e *env) waitContainerExit(taskID string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := executor.ContainerName(executor.Key{TaskID: taskID, Attempt: 1})
	okC, errC := dockertest.Client(e.t).ContainerWait(ctx, name, container.WaitConditionNotRunning)
	select {
	case <-okC:
	case err := <-errC:
		e.t.Fatalf("waiting for the container of %s to exit: %v", taskID, err)
	}
}
