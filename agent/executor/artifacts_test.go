package executor_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// fakeUploader reads each file it is handed at once, says it has tried them
// all, and finishes only when the test releases it.
type fakeUploader struct {
	mu       sync.Mutex
	taskID   string
	contents map[string]string
	dirs     []string
	release  chan struct{}
	// lateNote, if set, is written into the task's log after Ended.
	lateNote string
}

type fakeJob struct {
	tried, ended, done chan struct{}
	once               sync.Once
}

func (j *fakeJob) Tried() <-chan struct{} { return j.tried }
func (j *fakeJob) Done() <-chan struct{}  { return j.done }
func (j *fakeJob) Ended()                 { j.once.Do(func() { close(j.ended) }) }

func (f *fakeUploader) Upload(ctx context.Context, u artifacts.Uploads) artifacts.Job {
	files, note := u.Files, u.Note
	f.mu.Lock()
	f.taskID = u.TaskID
	f.contents = map[string]string{}
	for _, file := range files {
		b, err := os.ReadFile(file.Path)
		if err != nil || int64(len(b)) != file.Size {
			f.contents[file.Name] = "unreadable"
			continue
		}
		f.contents[file.Name] = string(b)
		f.dirs = append(f.dirs, file.Path)
	}
	f.mu.Unlock()
	note("fake upload tried")
	j := &fakeJob{tried: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{})}
	close(j.tried)
	go func() {
		defer close(j.done)
		select {
		case <-j.ended:
		case <-ctx.Done():
			return
		}
		if f.lateNote != "" {
			note(f.lateNote)
		}
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	}()
	return j
}

// What a task leaves in /workspace/.podium/artifacts, and what it publishes
// with podium-runner artifact add, is handed to the uploader when it exits,
// named by its path there; a symbolic link is skipped with a note. The
// terminal status comes after the first try, and the task's directory stays
// until the uploads are done.
func TestArtifactsAreCollectedWhenTheTaskExits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := &fakeUploader{release: make(chan struct{}), lateNote: "artifact x: upload failed: try later (will retry)"}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(up.release) }) }
	t.Cleanup(release) // registered after setup's, so it runs before it
	e.exec = e.newExecutorWith(up)
	script := `set -e
cd /workspace/.podium/artifacts
echo hello > a.txt
mkdir -p reports && echo '<testsuite/>' > reports/junit.xml
ln -s /etc/passwd passwd-link
mkfifo pipe
echo published > /workspace/p.txt
podium-runner artifact add /workspace/p.txt --name pub/p.txt
podium-runner artifact add /workspace/p.txt
echo changed-after-add > /workspace/p.txt
ls -la /workspace/.podium/artifacts >&2`
	rec := newRecorder()
	a := e.assign(t, e.sh(script))
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	select {
	case <-done:
		t.Fatal("the run ended while its artifacts were still uploading")
	case <-time.After(100 * time.Millisecond):
	}
	up.mu.Lock()
	got := up.contents
	paths := up.dirs
	up.mu.Unlock()
	want := map[string]string{"a.txt": "hello\n", "reports/junit.xml": "<testsuite/>\n", "pub/p.txt": "published\n", "p.txt": "published\n"}
	if len(got) != len(want) {
		t.Fatalf("uploaded %v, want %v", got, want)
	}
	for name, content := range want {
		if got[name] != content {
			t.Errorf("%s: uploaded %q, want %q", name, got[name], content)
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s is gone while its upload is still running: %v", p, err)
		}
	}
	release()
	waitDone(t, done, 10*time.Second)
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after the uploads ended", p)
		}
	}

	// The notes: the skipped link and FIFO and the first try before the
	// terminal status, a late note after it.
	var order []string
	for _, ev := range rec.all() {
		switch {
		case ev.GetNote() != nil:
			order = append(order, ev.GetNote().GetText())
		case ev.GetStatus() != nil:
			order = append(order, ev.GetStatus().GetState().String())
		}
	}
	wantOrder := []string{"TASK_STATE_PROVISIONING", "TASK_STATE_RUNNING",
		"artifact passwd-link skipped: it is a symbolic link; only regular files are uploaded",
		"artifact pipe skipped: it is not a regular file (a FIFO)",
		"fake upload tried", "TASK_STATE_SUCCEEDED", "artifact x: upload failed: try later (will retry)"}
	if !slices.Equal(order, wantOrder) {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(wantOrder, "\n"))
	}
	if up.taskID != a.TaskId {
		t.Fatalf("uploaded for %q, want %q", up.taskID, a.TaskId)
	}
}

// A task that leaves nothing has nothing uploaded and ends as before.
func TestNoArtifactsNoUpload(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := &fakeUploader{release: make(chan struct{})}
	e.exec = e.newExecutorWith(up)
	rec, key := e.run(t, e.sh("test -d /workspace/.podium/artifacts && test -w /workspace/.podium/artifacts"))
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("status %v: the artifacts directory is not there or not writable", st)
	}
	if up.contents != nil {
		t.Fatalf("uploaded %v for a task that left nothing", up.contents)
	}
}

var _ attempt.Emit = newRecorder().emit

// runWithGlobs runs script with the spec's artifacts globs and returns what
// was handed to the uploader (name → content) and the run's events.
func runWithGlobs(t *testing.T, e *env, script string, globs []string) (map[string]string, *recorder) {
	t.Helper()
	up := &fakeUploader{release: make(chan struct{})}
	close(up.release)
	e.exec = e.newExecutorWith(up)
	spec := e.sh(script)
	spec.Artifacts = globs
	rec, key := e.run(t, spec)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v\nstderr: %s", st, rec.output(t, podiumv1.LogStream_LOG_STREAM_STDERR))
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.contents, rec
}

// skipNotes are the run's "artifact … skipped" notes.
func skipNotes(rec *recorder) []string {
	var out []string
	for _, n := range rec.notes() {
		if strings.HasPrefix(n, "artifact ") && strings.Contains(n, " skipped: ") {
			out = append(out, n)
		}
	}
	return out
}

// Globs narrow the artifacts directory and widen to the rest of the
// workspace: exactly the matching regular files are uploaded, byte for byte,
// those from .podium/artifacts named relative to it and the others relative
// to /workspace. A hard link is a file like any other; a symbolic link (to
// the container's /etc/passwd) is skipped with a note, and so is nothing
// else; a glob whose directory does not exist matches nothing, quietly. A
// file published with podium-runner artifact add is uploaded though no glob
// matches it.
func TestArtifactGlobsNarrowAndWiden(t *testing.T) {
	t.Parallel()
	e := setup(t)
	script := `set -e
cd /workspace
mkdir -p dist .podium/artifacts
head -c 300000 /dev/urandom > dist/a.tar.gz
ln dist/a.tar.gz dist/c.tar.gz
echo text > dist/b.txt
ln -s /etc/passwd dist/passwd.tar.gz
echo '<r/>' > .podium/artifacts/r.xml
echo log > .podium/artifacts/x.log
echo published > notes.log
podium-runner artifact add notes.log --name pub.log
sha256sum dist/a.tar.gz`
	got, rec := runWithGlobs(t, e, script, []string{"dist/*.tar.gz", ".podium/artifacts/*.xml", "missing/**"})
	want := map[string]string{"r.xml": "<r/>\n", "pub.log": "published\n"}
	sum, _, _ := strings.Cut(string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)), " ")
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"dist/a.tar.gz", "dist/c.tar.gz", "pub.log", "r.xml"}) {
		t.Fatalf("uploaded %q, want dist/a.tar.gz, dist/c.tar.gz, pub.log and r.xml", names)
	}
	for name, content := range want {
		if got[name] != content {
			t.Errorf("%s: uploaded %q, want %q", name, got[name], content)
		}
	}
	for _, name := range []string{"dist/a.tar.gz", "dist/c.tar.gz"} {
		h := sha256.Sum256([]byte(got[name]))
		if hex.EncodeToString(h[:]) != sum || len(got[name]) != 300000 {
			t.Errorf("%s: uploaded %d bytes with sha256 %x, the task's sha256sum says %s", name, len(got[name]), h, sum)
		}
	}
	wantNotes := []string{"artifact dist/passwd.tar.gz skipped: it is a symbolic link; only regular files are uploaded"}
	if notes := skipNotes(rec); !slices.Equal(notes, wantNotes) {
		t.Errorf("skip notes %q, want %q", notes, wantNotes)
	}
	for _, n := range rec.notes() {
		if strings.Contains(n, "workspace could not be read") {
			t.Errorf("note %q: a missing directory is no failure", n)
		}
	}
}

// A glob without a directory of its own reads the whole workspace. Files of
// the artifacts directory are still named relative to it, once each; when a
// workspace file would get the same name, the one in .podium/artifacts wins
// and the other is noted.
func TestArtifactGlobOverTheWholeWorkspace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	script := `set -e
cd /workspace
mkdir -p reports/u .podium/artifacts
echo '<t/>' > reports/u/t.xml
echo '<r/>' > .podium/artifacts/r.xml
echo '<ws/>' > dup.xml
echo '<art/>' > .podium/artifacts/dup.xml
echo no > a.txt`
	got, rec := runWithGlobs(t, e, script, []string{"**/*.xml"})
	want := map[string]string{"reports/u/t.xml": "<t/>\n", "r.xml": "<r/>\n", "dup.xml": "<art/>\n"}
	if !maps.Equal(got, want) {
		t.Fatalf("uploaded %q, want %q", got, want)
	}
	wantNotes := []string{"artifact dup.xml skipped: a file of the same name in /workspace/.podium/artifacts is uploaded instead"}
	if notes := skipNotes(rec); !slices.Equal(notes, wantNotes) {
		t.Errorf("skip notes %q, want %q", notes, wantNotes)
	}
}

// The node refuses globs the coordinator would have refused, whatever it
// was sent, before anything runs.
func TestArtifactGlobOutsideTheWorkspaceFails(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("true")
	spec.Artifacts = []string{"dist/*", "../../etc/*"}
	rec, key := e.run(t, spec)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "spec.artifacts[1]") ||
		!strings.Contains(st.GetReason(), `".." segment`) {
		t.Fatalf("final status %v, want FAILED naming spec.artifacts[1] and its \"..\"", st)
	}
}

// An agent that stops while the task runs leaves the workspace to the next
// one: if the task's container is still there, the next agent copies the
// selected files out of it; if someone removed it, the next agent says in
// the task's log that they could not be collected.
func TestArtifactGlobsAfterAnAgentRestart(t *testing.T) {
	t.Parallel()
	for _, removed := range []bool{false, true} {
		t.Run(fmt.Sprintf("container removed %v", removed), func(t *testing.T) {
			e := setup(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			spec := e.sh(`mkdir -p /workspace/dist; echo started; sleep 1; echo built > /workspace/dist/app.tar.gz`)
			spec.Artifacts = []string{"dist/*.tar.gz"}
			a := e.assign(t, spec)
			key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
			first := newRecorder()
			done, err := e.exec.Start(ctx, a, first.emit)
			if err != nil {
				t.Fatal(err)
			}
			waitOutputContains(t, first, "started\n")
			stop()
			waitDone(t, done, 30*time.Second)
			wc, ec := e.docker.ContainerWait(context.Background(), executor.ContainerName(key), container.WaitConditionNotRunning)
			select {
			case <-wc:
			case err := <-ec:
				t.Fatal(err)
			}
			if removed {
				if err := e.docker.ContainerRemove(context.Background(), executor.ContainerName(key), container.RemoveOptions{Force: true}); err != nil {
					t.Fatal(err)
				}
			}
			up := &fakeUploader{release: make(chan struct{})}
			close(up.release)
			second := newRecorder()
			done, err = e.newExecutorWith(up).Resume(context.Background(), a, first.lastCursor(), second.emit)
			if err != nil {
				t.Fatal(err)
			}
			waitDone(t, done, 60*time.Second)
			if st := second.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				t.Fatalf("final status %v", st)
			}
			up.mu.Lock()
			got := up.contents
			up.mu.Unlock()
			noted := slices.ContainsFunc(second.notes(), func(n string) bool { return strings.Contains(n, "were not collected") })
			if removed {
				if got != nil || !noted {
					t.Fatalf("uploaded %q, notes %q; want nothing uploaded and a note saying why", got, second.notes())
				}
				return
			}
			if !maps.Equal(got, map[string]string{"dist/app.tar.gz": "built\n"}) || noted {
				t.Fatalf("uploaded %q, notes %q; want dist/app.tar.gz", got, second.notes())
			}
		})
	}
}

// The runner log of a finished attempt whose terminal status is stored goes
// at once, though its artifacts are still uploading: it holds the task's
// whole output, and nothing needs it any more. Until the status is stored it
// stays (a restarted agent would finish the task from it).
func TestRunnerLogGoesOnceTheStatusIsStored(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := &fakeUploader{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(up.release) }) }
	t.Cleanup(release)
	var stored atomic.Bool
	var storedSeq atomic.Uint64
	ex, err := executor.New(executor.Config{
		Docker: e.docker, NodeID: e.nodeID, RunnerPath: agenttest.Runner(t), TasksDir: e.tasksDir,
		Logger:    slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, e.logs), nil)),
		Artifacts: up,
		Stored: func(k executor.Key, seq uint64) bool {
			storedSeq.Store(seq)
			return stored.Load()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.execs = append(e.execs, ex)
	rec := newRecorder()
	a := e.assign(t, e.sh(`yes output | head -c 100000; echo kept > /workspace/.podium/artifacts/a.txt`))
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	dir := filepath.Join(e.tasksDir, attempt.FileName(attempt.Of(a)))
	runnerLog := filepath.Join(dir, "output.log")
	wait.For(t, 10*time.Second, "the run to ask whether its terminal status is stored", func() bool { return storedSeq.Load() > 0 })
	if _, err := os.Stat(runnerLog); err != nil {
		t.Fatalf("the runner log is gone before the terminal status was stored: %v", err)
	}
	if got, want := storedSeq.Load(), uint64(len(rec.all())); got != want {
		t.Fatalf("the run asks whether seq %d is stored; its terminal status is seq %d", got, want)
	}
	stored.Store(true)
	wait.For(t, 10*time.Second, "the runner log to go once the terminal status is stored", func() bool {
		_, err := os.Stat(runnerLog)
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := os.Stat(filepath.Join(dir, "artifacts", "a.txt")); err != nil {
		t.Fatalf("the artifact being uploaded went with the runner log: %v", err)
	}
	select {
	case <-done:
		t.Fatal("the run ended while its artifacts were still uploading")
	default:
	}
	release()
	waitDone(t, done, 10*time.Second)
}
