package attempt_test

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// safe is every byte FileName may write: nothing that is a path separator
// or can make "." or "..".
func safe(name string) bool {
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%") == ""
}

func TestFileNameEscapesAndRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  attempt.Key
		want string
	}{
		{attempt.Key{TaskID: "task_01JD5X", Attempt: 1}, "task_01JD5X-1"},
		{attempt.Key{TaskID: "a-b", Attempt: 12}, "a-b-12"},
		{attempt.Key{TaskID: "../etc", Attempt: 2}, "%2E%2E%2Fetc-2"},
		{attempt.Key{TaskID: "a/b", Attempt: 3}, "a%2Fb-3"},
		{attempt.Key{TaskID: "100%", Attempt: 4}, "100%25-4"},
		{attempt.Key{TaskID: "é", Attempt: 5}, "%C3%A9-5"},
	} {
		got := attempt.FileName(tc.key)
		if got != tc.want {
			t.Errorf("FileName(%v) = %q, want %q", tc.key, got, tc.want)
		}
		if back, ok := attempt.ParseFileName(got); !ok || back != tc.key {
			t.Errorf("ParseFileName(%q) = %v, %v; want %v", got, back, ok, tc.key)
		}
	}
	for _, name := range []string{"", "-1", "task", "task-x", "task%zz-1"} {
		if k, ok := attempt.ParseFileName(name); ok {
			t.Errorf("ParseFileName(%q) = %v, want refused", name, k)
		}
	}
}

// Whatever a task id holds, its file name stays inside the directory and
// names the same attempt when read back.
func FuzzFileName(f *testing.F) {
	f.Add("task_01JD5X", int32(1))
	f.Add("../../x", int32(2))
	f.Add("a-b-%2F", int32(0))
	f.Fuzz(func(t *testing.T, id string, n int32) {
		if id == "" || n < 0 {
			return // neither is ever an attempt
		}
		k := attempt.Key{TaskID: id, Attempt: n}
		name := attempt.FileName(k)
		if !safe(name) {
			t.Fatalf("FileName(%v) = %q, which holds a byte it should have escaped", k, name)
		}
		if back, ok := attempt.ParseFileName(name); !ok || back != k {
			t.Fatalf("ParseFileName(FileName(%v)) = %v, %v", k, back, ok)
		}
	})
}

func TestIsFinal(t *testing.T) {
	t.Parallel()
	status := func(s podiumv1.TaskState) *podiumv1.TaskEvent {
		return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
	}
	for _, tc := range []struct {
		name         string
		ev           *podiumv1.TaskEvent
		final, ended bool
	}{
		{"succeeded", status(podiumv1.TaskState_TASK_STATE_SUCCEEDED), true, true},
		{"failed", status(podiumv1.TaskState_TASK_STATE_FAILED), true, true},
		{"cancelled", status(podiumv1.TaskState_TASK_STATE_CANCELLED), true, true},
		{"lost", status(podiumv1.TaskState_TASK_STATE_LOST), true, true},
		{"rejected (queued)", status(podiumv1.TaskState_TASK_STATE_QUEUED), true, false},
		{"running", status(podiumv1.TaskState_TASK_STATE_RUNNING), false, false},
		{"a log chunk", &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{}}}, false, false},
	} {
		if final, ended := attempt.IsFinal(tc.ev); final != tc.final || ended != tc.ended {
			t.Errorf("%s: IsFinal = %v, %v; want %v, %v", tc.name, final, ended, tc.final, tc.ended)
		}
	}
}

// A cursor is stored in the spool by one agent version and read back by the
// next, so its encoding is pinned, not merely round-tripped.
func TestCursorEncodingIsStable(t *testing.T) {
	t.Parallel()
	c := attempt.Cursor{Started: true, Task: runlog.Position{File: 100, Stdout: 6, Stderr: 2},
		Sidecars: map[string]runlog.Position{"db": {File: 40, Stdout: 3}}}
	const stored = `{"started":true,"task":{"file":100,"stdout":6,"stderr":2},"sidecars":{"db":{"file":40,"stdout":3,"stderr":0}}}`
	if got := string(c.Marshal()); got != stored {
		t.Fatalf("Marshal = %s, want %s", got, stored)
	}
	back, err := attempt.ParseCursor([]byte(stored))
	if err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("ParseCursor = %+v, %v; want %+v", back, err, c)
	}
	// An attempt that reached its output limit stores how much it used.
	capped := attempt.Cursor{Task: runlog.Position{File: 17}, Output: 1 << 20, Capped: true}
	const storedCapped = `{"task":{"file":17,"stdout":0,"stderr":0},"output":1048576,"capped":true}`
	if got := string(capped.Marshal()); got != storedCapped {
		t.Fatalf("Marshal = %s, want %s", got, storedCapped)
	}
	if back, err := attempt.ParseCursor([]byte(storedCapped)); err != nil || !reflect.DeepEqual(back, capped) {
		t.Fatalf("ParseCursor = %+v, %v; want %+v", back, err, capped)
	}
	if zero, err := attempt.ParseCursor(nil); err != nil || !reflect.DeepEqual(zero, attempt.Cursor{}) {
		t.Fatalf("ParseCursor(nil) = %+v, %v; want the zero cursor", zero, err)
	}
	if _, err := attempt.ParseCursor([]byte("{")); err == nil {
		t.Fatal("ParseCursor of a damaged cursor: no error")
	}
	clone := c.Clone()
	clone.Sidecars["db"] = runlog.Position{}
	if c.Sidecars["db"].Stdout != 3 {
		t.Fatal("Clone shares its sidecars with the original")
	}
}

// RedactAssign keeps what an operator needs to tell the task apart and
// nothing a user may have put a secret into: the values of the environment
// and the command line.
func TestRedactAssignKeepsSecretsOut(t *testing.T) {
	t.Parallel()
	a := &podiumv1.Assign{TaskId: "task_1", Attempt: 2, Spec: &podiumv1.TaskSpec{
		Image:    "alpine:3",
		Command:  []string{"sh", "-c", "curl -H 'Authorization: cmd-s3cr3t' example.com"},
		Env:      map[string]string{"API_TOKEN": "env-s3cr3t"},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Env: map[string]string{"PASSWORD": "sidecar-s3cr3t"}}},
	}, Secrets: []*podiumv1.SecretValue{{Name: "db-password", Value: []byte("value-s3cr3t"), Env: "PGPASSWORD"}}}
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("task accepted", "assign", attempt.RedactAssign(a))
		out := buf.String()
		if strings.Contains(out, "s3cr3t") {
			t.Fatalf("a secret reached the log: %s", out)
		}
		for _, want := range []string{"task_1", "alpine:3", "API_TOKEN", "db", "db-password"} {
			if !strings.Contains(out, want) {
				t.Fatalf("the redacted log lost %q, which an operator needs: %s", want, out)
			}
		}
	}
}
