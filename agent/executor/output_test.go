package executor_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// newExecutorConfig is newExecutor with the Config changed by set.
func (e *env) newExecutorConfig(set func(*executor.Config)) *executor.Executor {
	cfg := executor.Config{
		Docker:     e.docker,
		NodeID:     e.nodeID,
		RunnerPath: agenttest.Runner(e.t),
		TasksDir:   e.tasksDir,
		Logger:     slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{e.t}, e.logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	set(&cfg)
	ex, err := executor.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.execs = append(e.execs, ex)
	return ex
}

// pattern is what `yes 0123456789abcdef` prints, n bytes of it.
func pattern(n int) []byte {
	return bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
}

// TestOutputLimitKeepsTheFirstBytesAndOneNote: a task that prints past its
// output limit has exactly the first limit's worth of its output kept, both
// streams together, one note saying the rest was dropped, and ends as it
// would have anyway, with its own exit code.
func TestOutputLimitKeepsTheFirstBytesAndOneNote(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const limit = 64 << 10
	spec := e.sh("yes 0123456789abcdef | head -c 200000; echo past the limit >&2; exit 3")
	spec.OutputLimitBytes = limit
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetExitCode() != 3 {
		t.Fatalf("final status %v, want FAILED with the task's own exit code 3", st)
	}
	if out := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); !bytes.Equal(out, pattern(limit)) {
		t.Fatalf("stdout kept %d bytes, want exactly the first %d the task printed", len(out), limit)
	}
	if errOut := rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR); len(errOut) != 0 {
		t.Fatalf("stderr past the limit was kept: %q", errOut)
	}
	var limitNotes []string
	for _, n := range rec.notes() {
		if strings.Contains(n, "output limit") {
			limitNotes = append(limitNotes, n)
		}
	}
	if len(limitNotes) != 1 || limitNotes[0] != "output limit of 64 KiB reached: further output of this attempt is dropped" {
		t.Fatalf("notes about the limit: %q, want one", limitNotes)
	}
	if cur := rec.lastCursor(); cur.Output != limit || !cur.Capped {
		t.Fatalf("cursor %+v, want output %d and capped, for a restarted agent", cur, limit)
	}
}

// A spec asking for more output than the node keeps is refused by the node
// too (the scheduler does not place it there; an older coordinator might).
func TestOutputLimitAboveTheNodesMaximumFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec = e.newExecutorConfig(func(c *executor.Config) { c.OutputLimit, c.MaxOutputLimit = 1<<20, 2<<20 })
	spec := e.sh("echo must not run")
	spec.OutputLimitBytes = 3 << 20
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "output limit of 3 MiB is more than this node keeps (2 MiB)") {
		t.Fatalf("final status %v, want FAILED naming the limits", st)
	}
}

// TestSidecarLinesAreRateLimited: a sidecar printing without pause has a
// burst of its lines shown, then a few a second, and the lines left out are
// counted in a note; its notes count against the attempt's output limit,
// which also bounds its runner log on the host.
func TestSidecarLinesAreRateLimited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("sleep 1")
	spec.OutputLimitBytes = 1 << 20
	spec.Sidecars = []*podiumv1.Sidecar{{Name: "noisy", Image: e.image, Command: []string{"yes"}}}
	start := time.Now()
	rec, key := e.run(t, spec)
	took := time.Since(start)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v, want SUCCEEDED", st)
	}
	shown, skipped := 0, 0
	for _, n := range rec.notes() {
		switch {
		case n == "[noisy] y":
			shown++
		case strings.HasPrefix(n, "[noisy] … ") && strings.Contains(n, " lines skipped: a sidecar's output is shown at up to 20 lines a second"):
			skipped++
		}
	}
	// The bound comes from the measured run time, so it holds however slow
	// the machine is: a burst of 200 lines, then 20 a second.
	if most := 200 + int(took.Seconds()*20) + 1; shown < 200 || shown > most || skipped < 1 || skipped > most {
		t.Fatalf("%d lines shown and %d notes of lines skipped in %s; want 200 to %d shown and some skipped", shown, skipped, took, most)
	}
}

// gate is an Emit that blocks log chunks after the first until released: a
// session whose coordinator has stopped acknowledging.
type gate struct {
	rec      *recorder
	logs     atomic.Int32
	blocked  chan struct{}
	once     sync.Once
	released chan struct{}
	release  func()
}

func newGate(t *testing.T) *gate {
	g := &gate{rec: newRecorder(), blocked: make(chan struct{}), released: make(chan struct{})}
	g.release = sync.OnceFunc(func() { close(g.released) })
	t.Cleanup(g.release) // a test that fails while it holds the run must not hang its cleanup
	return g
}

func (g *gate) emit(ev *podiumv1.TaskEvent, cur *attempt.Cursor) {
	if ev.GetLog() != nil && g.logs.Add(1) > 1 {
		g.once.Do(func() { close(g.blocked) })
		<-g.released
	}
	g.rec.emit(ev, cur)
}

// TestBackPressureHoldsTheTaskAndLosesNothing: while the agent cannot pass a
// task's output on, the runner writes no further than its backlog past what
// the agent has read, which holds the task back; once the output flows
// again, every byte arrives and the task ends as it would have.
func TestBackPressureHoldsTheTaskAndLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const backlog = 256 << 10
	const total = 4000000
	ex := e.newExecutorConfig(func(c *executor.Config) { c.RunnerBacklog = backlog })
	g := newGate(t)
	a := e.assign(t, e.sh("yes 0123456789abcdef | head -c 4000000; exit 5"))
	done, err := ex.Start(context.Background(), a, g.emit)
	if err != nil {
		t.Fatal(err)
	}
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	wait.Closed(t, 60*time.Second, "the agent to stop passing the task's output on", g.blocked)
	log := filepath.Join(e.tasksDir, attempt.FileName(key), "output.log")
	size := func() int64 {
		st, err := os.Stat(log)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	wait.For(t, 30*time.Second, "the runner to fill its backlog", func() bool { return size() > backlog })
	// What the agent read before it blocked: at most its reads ahead
	// (runlog's 256 KiB) and a chunk; then the backlog, and a record the
	// runner started before it looked.
	if most := int64(256<<10 + executor.MaxChunk + backlog + runlog.MaxRecordData + 17 + len(runlog.Magic)); size() > most {
		t.Fatalf("the runner log grew to %d bytes while the agent could not pass output on; want at most %d", size(), most)
	}
	g.release()
	waitDone(t, done, 60*time.Second)
	st := g.rec.final(t, key)
	if st.GetExitCode() != 5 {
		t.Fatalf("final status %v, want the task's exit code 5", st)
	}
	if out := g.rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT); !bytes.Equal(out, pattern(total)) {
		t.Fatalf("stdout has %d bytes, want all %d the task printed", len(out), total)
	}
}

// The count against the output limit rides in the cursor: an agent that
// resumes an attempt lets it print only what is left of its limit, and
// notes the limit once.
func TestOutputLimitHoldsAcrossAnAgentRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const limit = 64 << 10
	spec := e.sh("yes 0123456789abcdef | head -c 40000; podium-runner ask >/dev/null; yes 0123456789abcdef | head -c 100000")
	spec.OutputLimitBytes = limit
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := newRecorder()
	a := e.assign(t, spec)
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "the first 40000 bytes", func() bool {
		return len(first.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)) == 40000
	})
	stop() // the agent stops; the task waits for a message
	waitDone(t, done, 30*time.Second)
	second := newRecorder()
	ex := e.newExecutor()
	done, err = ex.Resume(context.Background(), a, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Inject(key.TaskID, key.Attempt, 1, "go on"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	if st := second.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	got := append(first.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT), secondOutput(t, second, podiumv1.LogStream_LOG_STREAM_STDOUT, 40000)...)
	want := append(pattern(40000), pattern(100000)...)[:limit]
	if !bytes.Equal(got, want) {
		t.Fatalf("kept %d bytes across the restart, want the first %d the task printed", len(got), limit)
	}
	notes := 0
	for _, n := range append(first.notes(), second.notes()...) {
		if strings.HasPrefix(n, "output limit of 64 KiB reached") {
			notes++
		}
	}
	if notes != 1 {
		t.Fatalf("%d notes about the limit, want 1", notes)
	}
}
