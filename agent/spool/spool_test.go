package spool_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func logEv(task string, seq uint64, data string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: 1, Seq: seq, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: []byte(data)}}}
}

func statusEv(task string, seq uint64, s podiumv1.TaskState) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: 1, Seq: seq, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
}

func open(t *testing.T, dir string) (*spool.Spool, map[string]*spool.Attempt) {
	t.Helper()
	s, as, err := spool.Open(dir, spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*spool.Attempt{}
	for _, a := range as {
		m[a.TaskID] = a
	}
	return s, m
}

func TestSpoolSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	assign := &podiumv1.Assign{TaskId: "t1", Attempt: 1, Spec: &podiumv1.TaskSpec{Image: "img", Env: map[string]string{"SECRET": "hunter2"}}}
	if err := s.Begin(assign, 0); err != nil {
		t.Fatal(err)
	}
	_ = s.Append(statusEv("t1", 1, podiumv1.TaskState_TASK_STATE_PROVISIONING), nil)
	_ = s.Append(logEv("t1", 2, "a"), []byte(`{"c":1}`))
	_ = s.Append(logEv("t1", 3, "b"), []byte(`{"c":2}`))
	_ = s.Ack(attempt.Key{TaskID: "t1", Attempt: 1}, 2)
	// A rejected assignment has no header.
	_ = s.Append(statusEv("t2", 1, podiumv1.TaskState_TASK_STATE_QUEUED), nil)
	_ = s.Close()

	raw, _ := os.ReadFile(filepath.Join(dir, "t1-1.spool"))
	if bytes.Contains(raw, []byte("hunter2")) {
		t.Fatal("the spool holds a value of the task's environment")
	}

	_, got := open(t, dir)
	a := got["t1"]
	if a == nil || a.Assign.GetSpec().GetImage() != "img" || a.LastSeq != 3 || a.Acked != 2 || len(a.Events) != 1 ||
		string(a.Events[0].GetLog().GetData()) != "b" || string(a.Cursor) != `{"c":2}` || a.Final {
		t.Fatalf("t1 reloaded as %+v", a)
	}
	b := got["t2"]
	if b == nil || b.Assign != nil || !b.Final || b.Ended || b.LastSeq != 1 {
		t.Fatalf("t2 reloaded as %+v", b)
	}
}

// TestSpoolKeepsSecretNamesNotValues: the assignment on disk names the
// attempt's secrets (a restarted agent must know to wait for them) and holds
// none of their values, while the assignment the caller runs keeps them.
func TestSpoolKeepsSecretNamesNotValues(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	assign := &podiumv1.Assign{TaskId: "t1", Attempt: 1, Spec: &podiumv1.TaskSpec{Image: "img"},
		Secrets: []*podiumv1.SecretValue{{Name: "db-password", Value: []byte("hunter2-s3cr3t"), Env: "PGPASSWORD"}}}
	if err := s.Begin(assign, 0); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if string(assign.GetSecrets()[0].GetValue()) != "hunter2-s3cr3t" {
		t.Fatal("Begin changed the caller's assignment")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "t1-1.spool"))
	if bytes.Contains(raw, []byte("hunter2-s3cr3t")) {
		t.Fatal("the spool holds a secret's value")
	}
	_, got := open(t, dir)
	sec := got["t1"].Assign.GetSecrets()
	if len(sec) != 1 || sec[0].GetName() != "db-password" || sec[0].GetEnv() != "PGPASSWORD" || len(sec[0].GetValue()) != 0 {
		t.Fatalf("reloaded secrets %v", sec)
	}
}

// A crash in the middle of an append leaves a torn record: it is cut off, and
// appends after the reopen are found by the next one.
func TestTornTailIsCutOff(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	_ = s.Begin(&podiumv1.Assign{TaskId: "t1", Attempt: 1}, 0)
	_ = s.Append(logEv("t1", 1, "a"), []byte("c1"))
	_ = s.Close()
	path := filepath.Join(dir, "t1-1.spool")
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.Write([]byte{'E', 0, 0, 0, 200, 1, 2})
	f.Close()

	s, got := open(t, dir)
	if a := got["t1"]; a == nil || a.LastSeq != 1 || string(a.Cursor) != "c1" {
		t.Fatalf("reloaded %+v", a)
	}
	_ = s.Append(logEv("t1", 2, "b"), []byte("c2"))
	_ = s.Close()
	_, got = open(t, dir)
	if a := got["t1"]; a.LastSeq != 2 || len(a.Events) != 2 || string(a.Cursor) != "c2" {
		t.Fatalf("after a torn tail and another append: %+v", a)
	}
}

// A long task's spool is compacted as acks come, and keeps its cursor and
// numbering through it.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	_ = s.Begin(&podiumv1.Assign{TaskId: "t1", Attempt: 1}, 0)
	chunk := strings.Repeat("x", 32<<10)
	const n = 400 // ~13 MB
	for i := uint64(1); i <= n; i++ {
		if err := s.Append(logEv("t1", i, chunk), []byte(`{"i":`+string(rune('0'+i%10))+`}`)); err != nil {
			t.Fatal(err)
		}
		if i > 2 {
			_ = s.Ack(attempt.Key{TaskID: "t1", Attempt: 1}, i-2)
		}
	}
	st, _ := os.Stat(filepath.Join(dir, "t1-1.spool"))
	if st.Size() > 8<<20 {
		t.Fatalf("spool is %d bytes with 2 events unacknowledged: it was never compacted", st.Size())
	}
	_ = s.Close()
	_, got := open(t, dir)
	a := got["t1"]
	if a.LastSeq != n || a.Acked != n-2 || len(a.Events) != 2 || a.Events[0].GetSeq() != n-1 || a.Assign == nil || len(a.Cursor) == 0 {
		t.Fatalf("after compaction: last %d acked %d events %d", a.LastSeq, a.Acked, len(a.Events))
	}
}

func TestRemoveAndBeginAfterRejection(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	_ = s.Append(statusEv("t1", 1, podiumv1.TaskState_TASK_STATE_QUEUED), nil)
	_ = s.Ack(attempt.Key{TaskID: "t1", Attempt: 1}, 1)
	_ = s.Remove(attempt.Key{TaskID: "t1", Attempt: 1})
	// Assigned again: seqs continue after the stored rejection.
	_ = s.Begin(&podiumv1.Assign{TaskId: "t1", Attempt: 1}, 1)
	_ = s.Append(statusEv("t1", 2, podiumv1.TaskState_TASK_STATE_PROVISIONING), nil)
	_ = s.Close()
	_, got := open(t, dir)
	if a := got["t1"]; a.LastSeq != 2 || a.Acked != 1 || len(a.Events) != 1 || a.Assign == nil {
		t.Fatalf("reloaded %+v", a)
	}
}

// TestSpoolKeepsNothingSecret: every field of an assignment that may hold a
// credential (the task's and its sidecars' environment, its secrets' values,
// its private registry logins, its notify entries) stays off the node's disk, while the assignment the caller runs
// keeps them all. A restarted agent needs none of them: it adopts containers
// that exist already, and the coordinator sends secret values again.
func TestSpoolKeepsNothingSecret(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	assign := &podiumv1.Assign{TaskId: "t1", Attempt: 1,
		Spec: &podiumv1.TaskSpec{Image: "registry.example.com:5000/app:1",
			Env: map[string]string{"API_TOKEN": "task-env-value-7f3a"},
			Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "registry.example.com:5000/pg:16",
				Env: map[string]string{"POSTGRES_PASSWORD": "sidecar-env-value-91cc"}}},
			Notify: []*podiumv1.Notify{{Url: "https://hooks.example.com/services/T000/B000/notify-url-credential-5e1d"}}},
		Secrets: []*podiumv1.SecretValue{{Name: "db-password", Value: []byte("secret-value-c0ffee"), Env: "PGPASSWORD"}},
		RegistryAuths: []*podiumv1.RegistryAuth{{Host: "registry.example.com:5000", Username: "robot$ci",
			Password: "registry-password-d00d"}}}
	before := proto.Clone(assign)
	if err := s.Begin(assign, 0); err != nil {
		t.Fatal(err)
	}
	_ = s.Append(statusEv("t1", 1, podiumv1.TaskState_TASK_STATE_PROVISIONING), []byte(`{"c":1}`))
	_ = s.Close()
	if !proto.Equal(assign, before) {
		t.Fatal("Begin changed the caller's assignment")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "t1-1.spool"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"task-env-value-7f3a", "sidecar-env-value-91cc", "secret-value-c0ffee",
		"registry-password-d00d", "robot$ci", "notify-url-credential-5e1d"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the spool file holds %q", secret)
		}
	}
	_, got := open(t, dir)
	a := got["t1"].Assign
	if a.GetSpec().GetImage() != assign.GetSpec().GetImage() || len(a.GetSpec().GetSidecars()) != 1 ||
		a.GetSpec().GetSidecars()[0].GetImage() != "registry.example.com:5000/pg:16" ||
		len(a.GetSecrets()) != 1 || a.GetSecrets()[0].GetName() != "db-password" {
		t.Fatalf("reloaded assignment lost what a restarted agent needs: %v", a)
	}
	if len(a.GetRegistryAuths()) != 0 || len(a.GetSpec().GetEnv()) != 0 || len(a.GetSpec().GetSidecars()[0].GetEnv()) != 0 {
		t.Fatalf("reloaded assignment holds credentials: %v", a)
	}
}
