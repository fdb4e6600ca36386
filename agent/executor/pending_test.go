package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// resumingUploader keeps what it is handed; each job notes one line, then
// reports nothing left and ends when the test releases it.
type resumingUploader struct {
	mu      sync.Mutex
	handed  []artifacts.Uploads
	release chan struct{}
}

func (u *resumingUploader) Upload(ctx context.Context, up artifacts.Uploads) artifacts.Job {
	u.mu.Lock()
	u.handed = append(u.handed, up)
	u.mu.Unlock()
	j := &fakeJob{tried: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{})}
	close(j.tried)
	go func() {
		defer close(j.done)
		up.Note("artifact a.txt: resumed")
		select {
		case <-u.release:
			up.Pending(up.EndedAt, nil)
		case <-ctx.Done():
		}
	}()
	return j
}

func writeTaskDir(t *testing.T, tasksDir, name string, record []byte) string {
	t.Helper()
	dir := filepath.Join(tasksDir, name)
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "artifacts", "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if record != nil {
		if err := os.WriteFile(filepath.Join(dir, "uploads.json"), record, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func record(t *testing.T, taskID string, endedAt time.Time, path string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"task_id": taskID, "attempt": 1, "ended_at": endedAt, "last_seq": 7,
		"files": []map[string]any{{"name": "a.txt", "path": path, "size": 6}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// At startup, an attempt directory whose record of pending uploads is inside
// the coordinator's window is kept and its files handed to the uploader, with
// the recorded end and the task's log continuing after the recorded seq; it
// goes once they are done. A record past the window, one cut short, one that
// names another attempt and one pointing outside its directory are removed
// with their directories and a line in the agent's log; a directory without
// a record goes as before.
func TestPendingUploadsAtStartup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	endedAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	ok := writeTaskDir(t, e.tasksDir, "task_ok-1", record(t, "task_ok", endedAt, "artifacts/a.txt"))
	old := writeTaskDir(t, e.tasksDir, "task_old-1", record(t, "task_old", time.Now().Add(-artifacts.UploadWindow-time.Second), "artifacts/a.txt"))
	full := record(t, "task_cut", endedAt, "artifacts/a.txt")
	cut := writeTaskDir(t, e.tasksDir, "task_cut-1", full[:len(full)/2])
	other := writeTaskDir(t, e.tasksDir, "task_other-1", record(t, "task_ok", endedAt, "artifacts/a.txt"))
	escape := writeTaskDir(t, e.tasksDir, "task_escape-1", record(t, "task_escape", endedAt, "../task_ok-1/artifacts/a.txt"))
	none := writeTaskDir(t, e.tasksDir, "task_none-1", nil)

	up := &resumingUploader{release: make(chan struct{})}
	ex := e.newExecutorWith(up)
	rec := newRecorder()
	continued := map[executor.Key]uint64{}
	ex.ResumeUploads(context.Background(), rec.emit, func(k executor.Key, seq uint64) { continued[k] = seq })
	if err := ex.RemoveOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{old, cut, other, escape, none} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", filepath.Base(dir), err)
		}
	}
	if _, err := os.Stat(filepath.Join(ok, "artifacts", "a.txt")); err != nil {
		t.Fatalf("the file waiting for its upload is gone: %v", err)
	}
	up.mu.Lock()
	handed := slices.Clone(up.handed)
	up.mu.Unlock()
	if len(handed) != 1 {
		t.Fatalf("handed %d attempts to the uploader, want task_ok's alone: %+v", len(handed), handed)
	}
	h := handed[0]
	want := artifacts.File{Name: "a.txt", Path: filepath.Join(ok, "artifacts", "a.txt"), Size: 6}
	if h.TaskID != "task_ok" || h.Attempt != 1 || !h.EndedAt.Equal(endedAt) || len(h.Files) != 1 || h.Files[0] != want {
		t.Fatalf("handed %+v, want task_ok/1 ended at %v with %+v", h, endedAt, want)
	}
	if got := continued[executor.Key{TaskID: "task_ok", Attempt: 1}]; len(continued) != 1 || got != 7 {
		t.Fatalf("continued %v, want task_ok/1 after seq 7", continued)
	}
	if n := rec.notes(); len(n) != 1 || n[0] != "artifact a.txt: resumed" {
		t.Fatalf("notes %q", n)
	}
	rec.mu.Lock()
	ev := rec.events[0]
	rec.mu.Unlock()
	if ev.GetTaskId() != "task_ok" || ev.GetAttempt() != 1 || ev.GetTime() == nil {
		t.Fatalf("the note went out as %v", ev)
	}
	logged := func(taskID, msg string) bool {
		return slices.ContainsFunc(strings.Split(e.logs.String(), "\n"), func(l string) bool {
			return strings.Contains(l, msg) && strings.Contains(l, " task_id="+taskID+" attempt=1 ")
		})
	}
	for taskID, msg := range map[string]string{
		"task_old":    "the coordinator's window for an attempt's pending artifact uploads has closed",
		"task_cut":    "the record of an attempt's pending artifact uploads cannot be used",
		"task_other":  "the record of an attempt's pending artifact uploads cannot be used",
		"task_escape": "the record of an attempt's pending artifact uploads cannot be used",
	} {
		if !logged(taskID, msg) {
			t.Errorf("the agent's log does not say %q of %s:\n%s", msg, taskID, e.logs.String())
		}
	}

	close(up.release)
	ex.Wait()
	if _, err := os.Stat(ok); !os.IsNotExist(err) {
		t.Fatalf("the directory is still there after its uploads ended (%v)", err)
	}
}

// stuckUploader's jobs never store anything: once the attempt has ended they
// note a failure, report every file as pending, and wait for the agent to
// stop.
type stuckUploader struct{}

type stuckJob struct {
	fakeJob
	up artifacts.Uploads
}

func (j *stuckJob) Ended() {
	j.once.Do(func() {
		j.up.Note("artifact a.txt: upload failed: down (will retry)")
		j.up.Pending(time.Now(), j.up.Files)
		close(j.ended)
	})
}

func (stuckUploader) Upload(ctx context.Context, up artifacts.Uploads) artifacts.Job {
	j := &stuckJob{fakeJob: fakeJob{tried: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{})}, up: up}
	close(j.tried)
	go func() {
		defer close(j.done)
		<-ctx.Done()
	}()
	return j
}

// A task whose artifacts still wait for their upload when its final status
// has been sent leaves their record in its directory, with the end, the seq
// of its newest event and the files; an agent stopping then keeps the
// directory, and the next executor resumes the uploads from it.
func TestPendingUploadsOutliveTheAgent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ex := e.newExecutorWith(stuckUploader{})
	a := e.assign(t, e.sh(`echo hi > /workspace/.podium/artifacts/a.txt`))
	rec := newRecorder()
	before := time.Now()
	done, err := ex.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	dir := filepath.Join(e.tasksDir, a.TaskId+"-1")
	var b []byte
	deadline := time.Now().Add(10 * time.Second)
	for b, err = os.ReadFile(filepath.Join(dir, "uploads.json")); err != nil; b, err = os.ReadFile(filepath.Join(dir, "uploads.json")) {
		if time.Now().After(deadline) {
			t.Fatalf("no record of the pending uploads: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got struct {
		TaskID  string    `json:"task_id"`
		Attempt int32     `json:"attempt"`
		EndedAt time.Time `json:"ended_at"`
		LastSeq uint64    `json:"last_seq"`
		Files   []struct {
			Name, Path string
			Size       int64
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	rec.mu.Lock()
	last := rec.events[len(rec.events)-1]
	rec.mu.Unlock()
	if got.TaskID != a.TaskId || got.Attempt != 1 || got.EndedAt.Before(before) || got.EndedAt.After(time.Now()) ||
		got.LastSeq != last.GetSeq() || last.GetNote() == nil ||
		len(got.Files) != 1 || got.Files[0].Name != "a.txt" || got.Files[0].Path != "artifacts/a.txt" || got.Files[0].Size != 3 {
		t.Fatalf("recorded %s; want the task, its end, seq %d (the failure's note) and artifacts/a.txt", b, last.GetSeq())
	}

	stop()
	waitDone(t, done, 10*time.Second)
	ex.Wait()
	up := &resumingUploader{release: make(chan struct{})}
	next := e.newExecutorWith(up)
	continued := map[executor.Key]uint64{}
	next.ResumeUploads(context.Background(), newRecorder().emit, func(k executor.Key, seq uint64) { continued[k] = seq })
	if err := next.RemoveOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	up.mu.Lock()
	handed := slices.Clone(up.handed)
	up.mu.Unlock()
	if len(handed) != 1 || len(handed[0].Files) != 1 || handed[0].Files[0].Path != filepath.Join(dir, "artifacts", "a.txt") ||
		!handed[0].EndedAt.Equal(got.EndedAt) || continued[executor.Key{TaskID: a.TaskId, Attempt: 1}] != got.LastSeq {
		t.Fatalf("handed %+v, continued %v", handed, continued)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "artifacts", "a.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("the file waiting for its upload reads %q (%v)", b, err)
	}
	close(up.release)
	next.Wait()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the directory is still there after its uploads ended (%v)", err)
	}
}
