package executor_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/egress"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// recorder collects what a run emits, the way the session would: with the
// newest cursor, which is what a restarted agent resumes from.
type recorder struct {
	mu     sync.Mutex
	events []*podiumv1.TaskEvent
	cursor attempt.Cursor
	// statusC receives every status change as it is emitted, so a test can
	// act when a task reaches RUNNING.
	statusC chan podiumv1.TaskState
}

func newRecorder() *recorder {
	return &recorder{statusC: make(chan podiumv1.TaskState, 16)}
}

func (r *recorder) emit(ev *podiumv1.TaskEvent, cur *attempt.Cursor) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	ev.Seq = uint64(len(r.events)) // as the session numbers them
	if cur != nil {
		r.cursor = *cur
	}
	r.mu.Unlock()
	if s := ev.GetStatus(); s != nil {
		r.statusC <- s.GetState()
	}
}

func (r *recorder) lastCursor() attempt.Cursor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cursor
}

func (r *recorder) all() []*podiumv1.TaskEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*podiumv1.TaskEvent(nil), r.events...)
}

// waitState blocks until the run emits state.
func (r *recorder) waitState(t *testing.T, want podiumv1.TaskState) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-r.statusC:
			if s == want {
				return
			}
			if isTerminal(s) {
				t.Fatalf("run ended %s while waiting for %s: %v", s, want, r.statuses())
			}
		case <-timeout:
			t.Fatalf("no %s within 30 s; events so far: %v", want, r.statuses())
		}
	}
}

func (r *recorder) statuses() []string {
	var out []string
	for _, ev := range r.all() {
		if s := ev.GetStatus(); s != nil {
			out = append(out, fmt.Sprintf("%s(%s)", s.GetState(), s.GetReason()))
		}
	}
	return out
}

// output reassembles one stream from its chunks, checking that each chunk
// starts exactly where the one before ended and is no bigger than MaxChunk.
func (r *recorder) output(t *testing.T, stream podiumv1.LogStream) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, ev := range r.all() {
		c := ev.GetLog()
		if c == nil || c.GetStream() != stream {
			continue
		}
		if c.GetOffset() != uint64(buf.Len()) {
			t.Fatalf("%s chunk at offset %d, want %d (offsets must be contiguous)", stream, c.GetOffset(), buf.Len())
		}
		if len(c.GetData()) == 0 || len(c.GetData()) > executor.MaxChunk {
			t.Fatalf("%s chunk of %d bytes, want 1..%d", stream, len(c.GetData()), executor.MaxChunk)
		}
		buf.Write(c.GetData())
	}
	return buf.Bytes()
}

// final checks the shape every run must have: PROVISIONING first, exactly one
// terminal status, and that status last, after every byte of output.
func (r *recorder) final(t *testing.T, key executor.Key) *podiumv1.StatusChange {
	t.Helper()
	evs := r.all()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	for _, ev := range evs {
		if ev.GetTaskId() != key.TaskID || ev.GetAttempt() != key.Attempt {
			t.Fatalf("event for %s/%d, want %s", ev.GetTaskId(), ev.GetAttempt(), key)
		}
		if ev.GetTime() == nil {
			t.Fatal("event without time")
		}
	}
	if s := evs[0].GetStatus(); s.GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("first event %v, want PROVISIONING", evs[0])
	}
	terminals := 0
	for _, ev := range evs {
		if isTerminal(ev.GetStatus().GetState()) {
			terminals++
		}
	}
	last := evs[len(evs)-1].GetStatus()
	if terminals != 1 || !isTerminal(last.GetState()) {
		t.Fatalf("want exactly one terminal status, as the last event; statuses: %v", r.statuses())
	}
	return last
}

func isTerminal(s podiumv1.TaskState) bool {
	switch s {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
		return true
	}
	return false
}

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

type env struct {
	logs     *logBuffer
	docker   *client.Client
	exec     *executor.Executor
	image    string
	nodeID   string
	tasksDir string
	t        *testing.T
	execs    []*executor.Executor
	// egress is the executors' egress filter; nil runs without one.
	egress *egress.Filter
	// limits are what the env's executors run tasks under.
	limits executor.Limits
	// networkPool is the warm pool of the executors made after it is set.
	networkPool int
	// usageSample is how often the executors made after it is set sample
	// a running task's stats (0: the default).
	usageSample time.Duration
	// allowPrivileged is the executors' AllowPrivilegedSidecars, for
	// those made after it is set.
	allowPrivileged bool
}

func setup(t *testing.T) *env { return setupWith(t, executor.Limits{}) }

// setupWith is setup with the node's limits on each task.
func setupWith(t *testing.T, limits executor.Limits) *env {
	t.Helper()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	e := &env{logs: &logBuffer{}, docker: dc, image: image, nodeID: agenttest.NodeID(t), tasksDir: t.TempDir(), t: t, limits: limits}
	e.exec = e.newExecutor()
	t.Cleanup(func() {
		// A test that failed half-way may leave a task that would run
		// for ever; the check below must not wait for it.
		for _, ex := range e.execs {
			for _, k := range ex.Tasks() {
				ex.Cancel(k.TaskID, k.Attempt, "the test is over", time.Second)
			}
			ex.Wait()
		}
		agenttest.AssertNoContainers(t, dc, e.nodeID)
		if entries, _ := os.ReadDir(e.tasksDir); len(entries) > 0 {
			t.Errorf("%d task directories are left in %s", len(entries), e.tasksDir)
		}
	})
	return e
}

// newExecutor makes an executor of the env's node: a second one stands for
// the next agent process.
func (e *env) newExecutor() *executor.Executor { return e.newExecutorWith(nil) }

// newExecutorWith is newExecutor with an artifact uploader.
func (e *env) newExecutorWith(up artifacts.Uploader) *executor.Executor {
	ex, err := executor.New(executor.Config{
		Docker:                  e.docker,
		NodeID:                  e.nodeID,
		RunnerPath:              agenttest.Runner(e.t),
		TasksDir:                e.tasksDir,
		Logger:                  slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{e.t}, e.logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Artifacts:               up,
		Egress:                  e.egress,
		Limits:                  e.limits,
		NetworkPool:             e.networkPool,
		UsageSample:             e.usageSample,
		AllowPrivilegedSidecars: e.allowPrivileged,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.execs = append(e.execs, ex)
	return ex
}

// logBuffer keeps the executor's log so a test can check what it says.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var taskSeq atomic.Int64 // tests run in parallel

func (e *env) assign(t *testing.T, spec *podiumv1.TaskSpec) *podiumv1.Assign {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	return &podiumv1.Assign{TaskId: fmt.Sprintf("t-%d-%s-%d", os.Getpid(), name, taskSeq.Add(1)), Attempt: 1, Spec: spec}
}

// run starts a task and waits for it to finish.
func (e *env) run(t *testing.T, spec *podiumv1.TaskSpec) (*recorder, executor.Key) {
	t.Helper()
	rec := newRecorder()
	a := e.assign(t, spec)
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	return rec, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
}

func waitDone(t *testing.T, done <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("run did not finish within %s", d)
	}
}

func (e *env) sh(script string) *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{Image: e.image, Command: []string{"sh", "-c", script}}
}

func TestExitCodeAndBothStreams(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, key := e.run(t, e.sh("echo out; echo err >&2; exit 3"))

	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetExitCode() != 3 || st.ExitCode == nil {
		t.Fatalf("final status %v, want FAILED exit 3", st)
	}
	if st.GetReason() != "exit code 3" || st.GetSignal() != 0 {
		t.Fatalf("reason %q signal %d, want \"exit code 3\" and no signal", st.GetReason(), st.GetSignal())
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "out\n" {
		t.Fatalf("stdout %q, want %q", got, "out\n")
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR)); got != "err\n" {
		t.Fatalf("stderr %q, want %q", got, "err\n")
	}
	want := []string{"TASK_STATE_PROVISIONING()", "TASK_STATE_RUNNING()", "TASK_STATE_FAILED(exit code 3)"}
	if got := rec.statuses(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("statuses %v, want %v", got, want)
	}
}

func TestSuccessEnvWorkdirAndEntrypointOverride(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh(`printf '%s|%s|' "$GREETING" "$(pwd)"; id -u`)
	spec.Env = map[string]string{"GREETING": "hello world"}
	spec.WorkingDir = "/bin"
	spec.Resources = &podiumv1.Resources{Cpu: 0.5, MemoryMb: 64, Pids: 50}
	rec, key := e.run(t, spec)

	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || st.ExitCode == nil || st.GetExitCode() != 0 {
		t.Fatalf("final status %v, want SUCCEEDED exit 0", st)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "hello world|/bin|0\n" {
		t.Fatalf("stdout %q", got)
	}
	// The environment may hold secrets: the agent's log names it, never its values.
	if logs := e.logs.String(); strings.Contains(logs, "hello world") || !strings.Contains(logs, "GREETING") {
		t.Fatalf("the log shows an environment value, or not even the variable's name:\n%s", logs)
	}
}

func TestKilledBySignal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, key := e.run(t, e.sh("kill -9 $$"))
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetExitCode() != 137 || st.GetSignal() != 9 ||
		st.GetReason() != "killed by signal 9" {
		t.Fatalf("final status %v, want FAILED exit 137 signal 9 reason \"killed by signal 9\"", st)
	}
}

// TestBinaryOutputIsByteExact sends 5 MB of random bytes mixed with text
// through stdout; the container prints the SHA-256 of exactly what it wrote
// on stderr, and the reassembled chunks must hash to the same.
func TestBinaryOutputIsByteExact(t *testing.T) {
	t.Parallel()
	e := setup(t)
	script := `set -e
mkdir -p /tmp
{ echo "text before"; head -c 5000000 /dev/urandom; printf '\n\000\377\376 invalid utf8 \303\050 end\n'; head -c 70000 /dev/urandom; echo "text after"; } > /tmp/out
cat /tmp/out
sha256sum < /tmp/out | cut -d' ' -f1 >&2
wc -c < /tmp/out >&2`
	rec, key := e.run(t, e.sh(script))

	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v, want SUCCEEDED; stderr %q", st, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
	}
	out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)
	lines := strings.Fields(string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR)))
	if len(lines) != 2 {
		t.Fatalf("stderr %q, want the sha256 and the size", lines)
	}
	sum := sha256.Sum256(out)
	if got := hex.EncodeToString(sum[:]); got != lines[0] {
		t.Fatalf("stdout (%d bytes) hashes to %s, the container wrote %s bytes hashing to %s", len(out), got, lines[1], lines[0])
	}
	if fmt.Sprint(len(out)) != lines[1] {
		t.Fatalf("stdout is %d bytes, the container wrote %s", len(out), lines[1])
	}
	if len(out) < 5_000_000 {
		t.Fatalf("stdout is only %d bytes", len(out))
	}
}

func TestManyShortLinesInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 20000
	rec, key := e.run(t, e.sh(fmt.Sprintf("seq 1 %d", n)))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT) // checks contiguous offsets
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if l != fmt.Sprint(i+1) {
			t.Fatalf("line %d is %q, want %d", i+1, l, i+1)
		}
	}
	chunks := 0
	for _, ev := range rec.all() {
		if ev.GetLog() != nil {
			chunks++
		}
	}
	t.Logf("%d lines (%d bytes) arrived in %d chunks", n, len(out), chunks)
}

func (e *env) containerGone(t *testing.T, key executor.Key) {
	t.Helper()
	list, err := e.docker.ContainerList(context.Background(), container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", executor.LabelTask+"="+key.TaskID)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("container %v still exists after the terminal event", list[0].Names)
	}
}

func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("echo started; sleep 600"))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	if e.exec.Running() != 1 {
		t.Fatalf("Running() = %d, want 1", e.exec.Running())
	}
	// RUNNING comes before the shell has printed anything; cancel once it has,
	// so that the output it wrote is what the test checks was kept.
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "started\n")
	if !e.exec.Cancel(a.TaskId, a.Attempt, "user asked", 5*time.Second) {
		t.Fatal("Cancel found no run")
	}
	waitDone(t, done, 30*time.Second)

	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED || st.GetReason() != "user asked" {
		t.Fatalf("final status %v, want CANCELLED \"user asked\"", st)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "started\n" {
		t.Fatalf("stdout %q", got)
	}
	e.containerGone(t, key)
	if e.exec.Running() != 0 {
		t.Fatalf("Running() = %d after the run ended", e.exec.Running())
	}
}

// TestCancelIgnoringTermIsKilled runs a task that ignores SIGTERM: the cancel
// must SIGKILL it once the grace period is over.
func TestCancelIgnoringTermIsKilled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("trap '' TERM; echo ready; while true; do sleep 1; done"))
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	// Give the shell time to install its trap before the signal arrives.
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "ready\n")
	start := time.Now()
	e.exec.Cancel(a.TaskId, 0, "stop now", time.Second)
	waitDone(t, done, 30*time.Second)
	took := time.Since(start)

	st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED || st.GetExitCode() != 137 || st.GetSignal() != 9 {
		t.Fatalf("final status %v, want CANCELLED with exit 137 (SIGKILL)", st)
	}
	if took < time.Second {
		t.Fatalf("killed after %s, before the 1 s grace was over", took)
	}
	t.Logf("SIGKILLed %s after the cancel", took)
}

func waitOutput(t *testing.T, rec *recorder, stream podiumv1.LogStream, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if string(rec.output(t, stream)) == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never became %q", stream, want)
}

// TestCancelBeforeStart cancels a task whose image is being pulled: the pull
// is abandoned and the task still ends CANCELLED, without a container.
func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	// The reference cannot be resolved here (no registry is reachable), so
	// the pull either hangs or fails; the cancel comes first either way
	// because it is issued before the run goroutine can reach the engine.
	a := e.assign(t, &podiumv1.TaskSpec{Image: "registry.invalid/podium/never:1", Command: []string{"true"}})
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "changed my mind", 0)
	waitDone(t, done, 30*time.Second)
	st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED || st.GetReason() != "changed my mind" {
		t.Fatalf("final status %v, want CANCELLED", st)
	}
	if st.ExitCode != nil {
		t.Fatalf("exit code %d set for a task that never ran", st.GetExitCode())
	}
}

func TestMissingImageFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const ref = "podium-test/nope:1"
	rec, key := e.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}})
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("final status %v, want FAILED", st)
	}
	if !strings.HasPrefix(st.GetReason(), `image "podium-test/nope:1"`) {
		t.Fatalf("reason %q does not name the image", st.GetReason())
	}
	var notes []string
	for _, ev := range rec.all() {
		if n := ev.GetNote(); n != nil {
			notes = append(notes, n.GetText())
		}
	}
	if len(notes) != 1 || notes[0] != "pulling "+ref {
		t.Fatalf("notes %q, want just \"pulling %s\"", notes, ref)
	}
	for _, s := range rec.statuses() {
		if strings.HasPrefix(s, "TASK_STATE_RUNNING") {
			t.Fatal("a task whose image was never pulled reported RUNNING")
		}
	}
}

// TestCommandNotFoundFails runs a command the image does not have. The init
// at PID 1 cannot exec it and exits 127, as a shell would, saying why on
// stderr.
func TestCommandNotFoundFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, key := e.run(t, &podiumv1.TaskSpec{Image: e.image, Command: []string{"/no/such/binary"}})
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetExitCode() != 127 {
		t.Fatalf("final status %v, want FAILED exit 127", st)
	}
	if stderr := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR); !bytes.Contains(stderr, []byte("/no/such/binary")) {
		t.Fatalf("stderr %q does not name the missing command", stderr)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("echo begun; sleep 600")
	spec.TimeoutSeconds = 1
	spec.CancelGraceSeconds = 1
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetReason() != executor.ReasonTimeout {
		t.Fatalf("final status %v, want FAILED reason %q", st, executor.ReasonTimeout)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "begun\n" {
		t.Fatalf("stdout %q", got)
	}
	e.containerGone(t, key)
}

func TestDuplicateAssignIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("sleep 600"))
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	if _, err := e.exec.Start(context.Background(), a, rec.emit); !errors.Is(err, attempt.ErrAlreadyRunning) {
		t.Fatalf("second Start of the same attempt: %v, want ErrAlreadyRunning", err)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "done", time.Second)
	waitDone(t, done, 30*time.Second)
	rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
}

// TestOutOfMemory runs a task past its memory limit: the kernel kills it and
// the reason starts with "oom", rather than a bare "killed by signal 9". The
// process the kernel kills is tail, not the shell the runner started: the
// runner's count of OOM kills in the container's cgroup is what tells.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh(`head -c 300m /dev/zero | tail; echo "tail exited $?"`)
	spec.Resources = &podiumv1.Resources{MemoryMb: 32}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), executor.ReasonOOM) {
		t.Fatalf("final status %v, want FAILED with a reason starting %q", st, executor.ReasonOOM)
	}
	t.Logf("reason: %s (exit %d)", st.GetReason(), st.GetExitCode())
}

// TestWithoutCommandRunsTheImagesEntrypointAndCmd: the runner replaces the
// image's entrypoint, so the agent must run what `docker run IMAGE` would.
func TestWithoutCommandRunsTheImagesEntrypointAndCmd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	img := buildImage(t, "podium-test/entrypoint:local", "FROM "+e.image+"\nENTRYPOINT [\"echo\", \"from-entrypoint\"]\nCMD [\"and-cmd\"]\n")
	rec, key := e.run(t, &podiumv1.TaskSpec{Image: img})
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "from-entrypoint and-cmd\n" {
		t.Fatalf("stdout %q, want the image's entrypoint and cmd to have run", got)
	}
}

// buildImage builds a small image from a Dockerfile on top of the test image.
func buildImage(t *testing.T, tag, dockerfile string) string {
	t.Helper()
	cmd := exec.Command("docker", "build", "-q", "-t", tag, "-")
	cmd.Stdin = strings.NewReader(dockerfile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
	return tag
}

// TestIsolationAndHardening looks at a running task from the engine's side
// and from inside: its own network, its workspace volume, labels on all of
// them, no capabilities but the ones asked for, no-new-privileges, no Docker
// socket.
func TestIsolationAndHardening(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	spec := e.sh(`grep CapEff /proc/self/status; echo data > /workspace/f && cat /workspace/f; ` +
		`test -S /var/run/docker.sock && echo SOCKET; echo ready; sleep 600`)
	spec.Capabilities = []string{"cap_chown"}
	rec := newRecorder()
	a := e.assign(t, spec)
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutputContains(t, rec, "ready\n")
	out := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
	// CAP_CHOWN is bit 0: the effective set is exactly that one.
	if !strings.Contains(out, "CapEff:\t0000000000000001") || !strings.Contains(out, "data\n") || strings.Contains(out, "SOCKET") {
		t.Fatalf("the task saw %q; want only CAP_CHOWN, a writable /workspace and no Docker socket", out)
	}
	info, err := e.docker.ContainerInspect(ctx, executor.ContainerName(key))
	if err != nil {
		t.Fatal(err)
	}
	h := info.HostConfig
	if h.Privileged || !slices.Equal(h.CapDrop, []string{"ALL"}) || !slices.Contains(h.SecurityOpt, "no-new-privileges") ||
		string(h.NetworkMode) != executor.NetworkName(key) {
		t.Fatalf("host config: privileged %v, cap drop %v, security %v, network %s", h.Privileged, h.CapDrop, h.SecurityOpt, h.NetworkMode)
	}
	for _, m := range info.Mounts {
		if strings.Contains(m.Source, "docker.sock") {
			t.Fatalf("the Docker socket is mounted: %v", m)
		}
	}
	if info.Config.Labels[executor.LabelTask] != key.TaskID || info.Config.Labels[executor.LabelNode] != e.nodeID {
		t.Fatalf("container labels %v", info.Config.Labels)
	}
	nw, err := e.docker.NetworkInspect(ctx, executor.NetworkName(key), network.InspectOptions{})
	if err != nil || nw.Driver != "bridge" || nw.Labels[executor.LabelTask] != key.TaskID || nw.Labels[executor.LabelNode] != e.nodeID {
		t.Fatalf("network %v (%v)", nw, err)
	}
	vol, err := e.docker.VolumeInspect(ctx, executor.VolumeName(key))
	if err != nil || vol.Labels[executor.LabelAttempt] != "1" {
		t.Fatalf("volume %v (%v)", vol, err)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "done looking", time.Second)
	waitDone(t, done, 30*time.Second)
	rec.final(t, key)
	agenttest.AssertNoContainers(t, e.docker, e.nodeID)
}

func TestCapabilityOutsideTheListFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("true")
	spec.Capabilities = []string{"SYS_ADMIN"}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "SYS_ADMIN") ||
		!strings.Contains(st.GetReason(), "NET_BIND_SERVICE") {
		t.Fatalf("final status %v, want FAILED naming SYS_ADMIN and the allowed list", st)
	}
}

// webSidecar serves one page with busybox httpd on port.
func (e *env) webSidecar(name string, port int, readiness *podiumv1.Readiness) *podiumv1.Sidecar {
	return &podiumv1.Sidecar{
		Name:  name,
		Image: e.image,
		Command: []string{"sh", "-c", fmt.Sprintf(
			"mkdir -p /www && echo hello from %s > /www/index.html && echo %s starting && sleep 0.5 && exec httpd -f -p %d -h /www", name, name, port)},
		Readiness: readiness,
	}
}

// TestSidecarsReachableByName starts three sidecars, one per kind of
// readiness check, and a task that talks to two of them by name.
func TestSidecarsReachableByName(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("wget -qO- http://web:8080/index.html; wget -qO- http://api:8081/index.html")
	spec.Sidecars = []*podiumv1.Sidecar{
		e.webSidecar("web", 8080, &podiumv1.Readiness{HttpPath: "/index.html", HttpPort: 8080, TimeoutSeconds: 20}),
		e.webSidecar("api", 8081, &podiumv1.Readiness{TcpPort: 8081, TimeoutSeconds: 20}),
		{Name: "flag", Image: e.image, Command: []string{"sh", "-c", "sleep 1; touch /ready; sleep 600"},
			Readiness: &podiumv1.Readiness{Command: []string{"test", "-f", "/ready"}, TimeoutSeconds: 20}},
	}
	rec, key := e.run(t, spec)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v; stderr %q", st, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "hello from web\nhello from api\n" {
		t.Fatalf("stdout %q", got)
	}
	notes := rec.notes()
	for _, want := range []string{"[web] web starting", "[api] api starting", "sidecar web is ready", "sidecar flag is ready"} {
		if !slices.Contains(notes, want) {
			t.Errorf("no note %q among %q", want, notes)
		}
	}
	// The sidecars were ready before the task started.
	var running, ready int
	for i, ev := range rec.all() {
		if ev.GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_RUNNING {
			running = i
		}
		if ev.GetNote().GetText() == "sidecar web is ready" {
			ready = i
		}
	}
	if ready > running {
		t.Fatalf("RUNNING (event %d) came before the web sidecar was ready (event %d)", running, ready)
	}
}

func (r *recorder) notes() []string {
	var out []string
	for _, ev := range r.all() {
		if n := ev.GetNote(); n != nil {
			out = append(out, n.GetText())
		}
	}
	return out
}

// TestSidecarNeverReadyFailsWithItsOutput: a sidecar whose port never opens
// fails the task, and the reason carries the sidecar's last lines, which is
// where a person finds out why.
func TestSidecarNeverReadyFailsWithItsOutput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("echo the task must not run")
	spec.Sidecars = []*podiumv1.Sidecar{{
		Name: "db", Image: e.image,
		Command:   []string{"sh", "-c", "echo booting; echo 'fatal: no configuration file' >&2; sleep 600"},
		Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 2},
	}}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), `sidecar "db" did not become ready within 2s`) ||
		!strings.Contains(st.GetReason(), "[db] fatal: no configuration file") {
		t.Fatalf("final status %v, want FAILED naming the sidecar and its last output", st)
	}
	if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); len(out) != 0 {
		t.Fatalf("the task ran: %q", out)
	}
	t.Logf("reason: %s", st.GetReason())
}

// TestInboxMessagesReadInOrderOnce delivers two messages (and a repeat of the
// first) to a task that reads two with `podium-runner ask`.
func TestInboxMessagesReadInOrderOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("echo waiting; podium-runner ask; podium-runner ask; echo done"))
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutputContains(t, rec, "waiting\n")
	for _, m := range []struct {
		id   int64
		text string
		want bool
	}{{1, "first", true}, {2, "second\n", true}, {1, "first", false}} {
		ok, err := e.exec.Inject(a.TaskId, a.Attempt, m.id, m.text)
		if err != nil || ok != m.want {
			t.Fatalf("Inject %d: %v, %v; want %v", m.id, ok, err, m.want)
		}
	}
	waitDone(t, done, 30*time.Second)
	st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "waiting\nfirst\nsecond\ndone\n" || st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("stdout %q, status %v", got, st)
	}
	if _, err := e.exec.Inject(a.TaskId, a.Attempt, 3, "late"); !errors.Is(err, attempt.ErrNotRunning) {
		t.Fatalf("Inject after the end: %v, want ErrNotRunning", err)
	}
}

func waitOutputContains(t *testing.T, rec *recorder, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("stdout never contained %q; it is %q", want, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT))
}

// resumeCase is one agent restart in the middle of a task: the first
// executor's context ends (the agent stops), the task goes on without it, and
// a second executor resumes from the first one's last cursor.
func resumeCase(t *testing.T, e *env, n int, between func(key executor.Key)) (*recorder, *recorder, executor.Key) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := newRecorder()
	spec := e.sh(fmt.Sprintf("for i in $(seq 1 %d); do echo $i; echo err$i >&2; sleep 0.05; done", n))
	a := e.assign(t, spec)
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutputContains(t, first, "3\n")
	stop()
	waitDone(t, done, 30*time.Second)
	if e.exec.Running() != 0 {
		t.Fatal("the run did not end with its context")
	}
	for _, s := range first.statuses() {
		if strings.Contains(s, "SUCCEEDED") || strings.Contains(s, "FAILED") || strings.Contains(s, "CANCELLED") {
			t.Fatalf("a stopping agent reported %s", s)
		}
	}
	if cs := containersOf(t, e, key); len(cs) != 1 {
		t.Fatalf("the task's container should outlive the agent; found %d", len(cs))
	}
	if between != nil {
		between(key)
	}
	second := newRecorder()
	done, err = e.newExecutor().Resume(context.Background(), a, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	return first, second, key
}

func containersOf(t *testing.T, e *env, key executor.Key) []container.Summary {
	t.Helper()
	cs, err := e.docker.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", executor.LabelTask+"="+key.TaskID), filters.Arg("label", executor.LabelRole+"=task"))})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// checkResumed checks that the two halves of the output, put together, are
// exactly what the task wrote, once each.
func checkResumed(t *testing.T, first, second *recorder, n int) {
	t.Helper()
	for _, s := range []struct {
		stream podiumv1.LogStream
		line   func(int) string
	}{
		{podiumv1.LogStream_LOG_STREAM_STDOUT, func(i int) string { return fmt.Sprintf("%d\n", i) }},
		{podiumv1.LogStream_LOG_STREAM_STDERR, func(i int) string { return fmt.Sprintf("err%d\n", i) }},
	} {
		var want strings.Builder
		for i := 1; i <= n; i++ {
			want.WriteString(s.line(i))
		}
		a := first.output(t, s.stream)
		b := secondOutput(t, second, s.stream, uint64(len(a)))
		if got := string(a) + string(b); got != want.String() {
			t.Fatalf("%s before the restart %q, after %q; want %q", s.stream, a, b, want.String())
		}
	}
}

// secondOutput reassembles a stream that starts at offset from.
func secondOutput(t *testing.T, r *recorder, stream podiumv1.LogStream, from uint64) []byte {
	t.Helper()
	var buf []byte
	for _, ev := range r.all() {
		c := ev.GetLog()
		if c == nil || c.GetStream() != stream {
			continue
		}
		if c.GetOffset() != from+uint64(len(buf)) {
			t.Fatalf("%s chunk at offset %d after the restart, want %d", stream, c.GetOffset(), from+uint64(len(buf)))
		}
		buf = append(buf, c.GetData()...)
	}
	return buf
}

func TestResumeAfterAgentRestartIsByteExact(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 60
	first, second, key := resumeCase(t, e, n, nil)
	st := second.final2(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	checkResumed(t, first, second, n)
	for _, s := range second.statuses() {
		if strings.Contains(s, "RUNNING") {
			t.Fatalf("RUNNING was reported again after the restart: %v", second.statuses())
		}
	}
}

// TestResumeOfATaskThatEndedWhileTheAgentWasDown: the task finishes while no
// agent runs, and someone even removes its container; its runner log still
// has everything, exit status included.
func TestResumeOfATaskThatEndedWhileTheAgentWasDown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 20
	first, second, key := resumeCase(t, e, n, func(key executor.Key) {
		ctx := context.Background()
		wc, ec := e.docker.ContainerWait(ctx, executor.ContainerName(key), container.WaitConditionNotRunning)
		select {
		case <-wc:
		case err := <-ec:
			t.Fatal(err)
		}
		if err := e.docker.ContainerRemove(ctx, executor.ContainerName(key), container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	})
	st := second.final2(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || st.GetExitCode() != 0 {
		t.Fatalf("final status %v", st)
	}
	checkResumed(t, first, second, n)
}

// final2 is final for the second half of a resumed run, which starts without
// PROVISIONING.
func (r *recorder) final2(t *testing.T, key executor.Key) *podiumv1.StatusChange {
	t.Helper()
	evs := r.all()
	if len(evs) == 0 {
		t.Fatal("no events after the restart")
	}
	last := evs[len(evs)-1].GetStatus()
	if !isTerminal(last.GetState()) {
		t.Fatalf("the last event is not a terminal status: %v", r.statuses())
	}
	for _, ev := range evs[:len(evs)-1] {
		if isTerminal(ev.GetStatus().GetState()) || ev.GetTaskId() != key.TaskID {
			t.Fatalf("unexpected event %v", ev)
		}
	}
	return last
}

func TestResumeWithNothingLeftIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.assign(t, e.sh("true"))
	_, err := e.exec.Resume(context.Background(), a, attempt.Cursor{}, newRecorder().emit)
	if !errors.Is(err, executor.ErrNotResumable) {
		t.Fatalf("Resume of an attempt with no container and no log: %v, want ErrNotResumable", err)
	}
}

// TestRemoveOrphans: what an earlier agent left of attempts nobody resumed
// goes, containers, networks, volumes and directories alike.
func TestRemoveOrphans(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	labels := map[string]string{executor.LabelTask: "t-orphan", executor.LabelAttempt: "1", executor.LabelNode: e.nodeID}
	if _, err := e.docker.NetworkCreate(ctx, fmt.Sprintf("podium-orphan-%d", os.Getpid()), network.CreateOptions{Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.docker.VolumeCreate(ctx, volume.CreateOptions{Name: fmt.Sprintf("podium-orphan-%d", os.Getpid()), Labels: labels}); err != nil {
		t.Fatal(err)
	}
	resp, err := e.docker.ContainerCreate(ctx, &container.Config{Image: e.image, Cmd: []string{"sleep", "600"}, Labels: labels}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.tasksDir, "t-orphan-1", "inbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.exec.RemoveOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	// setup's cleanup checks that nothing is left.
}

// TestRestartDuringCancelGrace: the agent stops while a cancelled task that
// ignores SIGTERM waits out its grace period; the next agent process still
// kills it when the grace is over and reports it cancelled, not failed.
func TestRestartDuringCancelGrace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := newRecorder()
	// The task ignores SIGTERM, saying so when it gets one.
	a := e.assign(t, e.sh("trap 'echo term' TERM; echo ready; while true; do sleep 0.1; done"))
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutputContains(t, first, "ready\n")
	start := time.Now()
	e.exec.Cancel(a.TaskId, a.Attempt, "user asked", 2*time.Second)
	// The agent records that it is stopping the task before it signals it,
	// so once the task has its SIGTERM the next agent process can know.
	waitOutputContains(t, first, "term\n")
	stop()
	waitDone(t, done, 30*time.Second)

	second := newRecorder()
	done, err = e.newExecutor().Resume(context.Background(), a, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 30*time.Second)
	st := second.final2(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED || st.GetReason() != "user asked" || st.GetSignal() != 9 {
		t.Fatalf("final status %v, want CANCELLED \"user asked\" by SIGKILL", st)
	}
	// Not before the grace was over (that it was killed at all is the status
	// above; how soon after is no business of a test).
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("killed %s after the cancel; want once the 2 s grace was over", took)
	}
}
