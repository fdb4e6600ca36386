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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/internal/dockertest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// recorder collects what a run emits, the way the session would.
type recorder struct {
	mu     sync.Mutex
	events []*podiumv1.TaskEvent
	// statusC receives every status change as it is emitted, so a test can
	// act when a task reaches RUNNING.
	statusC chan podiumv1.TaskState
}

func newRecorder() *recorder {
	return &recorder{statusC: make(chan podiumv1.TaskState, 16)}
}

func (r *recorder) emit(ev *podiumv1.TaskEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if s := ev.GetStatus(); s != nil {
		r.statusC <- s.GetState()
	}
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

type env struct {
	logs   *logBuffer
	docker *client.Client
	exec   *executor.Executor
	image  string
	nodeID string
}

func setup(t *testing.T) *env {
	t.Helper()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	nodeID := agenttest.NodeID(t)
	logs := &logBuffer{}
	ex, err := executor.New(executor.Config{
		Docker: dc,
		NodeID: nodeID,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ex.Wait()
		agenttest.AssertNoContainers(t, dc, nodeID)
	})
	return &env{logs: logs, docker: dc, exec: ex, image: image, nodeID: nodeID}
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

var taskSeq int

func (e *env) assign(t *testing.T, spec *podiumv1.TaskSpec) *podiumv1.Assign {
	taskSeq++
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	return &podiumv1.Assign{TaskId: fmt.Sprintf("t-%d-%s-%d", os.Getpid(), name, taskSeq), Attempt: 1, Spec: spec}
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
	e := setup(t)
	const ref = "podium-test/nope:1"
	rec, key := e.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}})
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("final status %v, want FAILED", st)
	}
	if !strings.HasPrefix(st.GetReason(), `image "podium-test/nope:1" could not be pulled: `) {
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
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("sleep 600"))
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	if _, err := e.exec.Start(context.Background(), a, rec.emit); !errors.Is(err, executor.ErrAlreadyRunning) {
		t.Fatalf("second Start of the same attempt: %v, want ErrAlreadyRunning", err)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "done", time.Second)
	waitDone(t, done, 30*time.Second)
	rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
}

// TestShutdownStopsAndRemoves ends the context a run was started with, as
// the agent does when it stops: the container goes away and no terminal status
// is reported.
func TestShutdownStopsAndRemoves(t *testing.T) {
	e := setup(t)
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := e.assign(t, e.sh("sleep 600"))
	done, err := e.exec.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	cancel()
	waitDone(t, done, 30*time.Second)
	for _, s := range rec.statuses() {
		if strings.Contains(s, "FAILED") || strings.Contains(s, "CANCELLED") || strings.Contains(s, "SUCCEEDED") {
			t.Fatalf("shutdown reported a terminal status: %v", rec.statuses())
		}
	}
	e.containerGone(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
}

func TestRemoveOrphans(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	resp, err := e.docker.ContainerCreate(ctx, &container.Config{
		Image:  e.image,
		Cmd:    []string{"sleep", "600"},
		Labels: map[string]string{executor.LabelTask: "t-orphan", executor.LabelAttempt: "1", executor.LabelNode: e.nodeID},
	}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.exec.RemoveOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	e.containerGone(t, executor.Key{TaskID: "t-orphan", Attempt: 1})
}

// TestOutOfMemory runs a task past its memory limit: the kernel kills it and
// the reason says so, rather than a bare "killed by signal 9".
func TestOutOfMemory(t *testing.T) {
	e := setup(t)
	spec := e.sh(`a=$(head -c 100000000 /dev/zero | tr '\000' x); echo ${#a}`)
	spec.Resources = &podiumv1.Resources{MemoryMb: 16}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), "out of memory") {
		t.Fatalf("final status %v, want FAILED out of memory", st)
	}
	t.Logf("reason: %s (exit %d)", st.GetReason(), st.GetExitCode())
}
