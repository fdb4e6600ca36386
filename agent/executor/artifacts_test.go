package executor_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
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

func (f *fakeUploader) Upload(ctx context.Context, taskID string, attempt int32, files []artifacts.File, note func(string)) artifacts.Job {
	f.mu.Lock()
	f.taskID = taskID
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

var _ executor.Emit = newRecorder().emit
