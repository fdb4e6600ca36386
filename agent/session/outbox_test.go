package session

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func logEvent(task string, n int) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: 1, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: make([]byte, n)}}}
}

func statusEvent(task string, s podiumv1.TaskState) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: 1, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
}

// TestOutboxBackpressure checks that output blocks once too much is
// unacknowledged, that an ack releases it, that status changes never block,
// and that close releases everyone. It runs in a synctest bubble, so
// synctest.Wait tells when the writers are blocked rather than guessing it
// with a sleep.
func TestOutboxBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOutbox(10_000, 0, nil, slog.Default())
		k := attempt.Key{TaskID: "t", Attempt: 1}
		o.add(logEvent("t", 6000), nil)
		done := make(chan struct{})
		go func() {
			o.add(logEvent("t", 6000), nil) // over the limit: blocks until the first is acked
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("output beyond the limit did not block")
		default:
		}
		o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_RUNNING), nil) // must not block
		o.ack(k, 1)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("an ack did not release blocked output")
		}
		if got := o.running(); len(got) != 1 || got[0].GetLastSeq() != 3 {
			t.Fatalf("running %v, want t with last_seq 3", got)
		}

		blocked := make(chan struct{})
		go func() {
			o.add(logEvent("t", 6000), nil)
			o.add(logEvent("t", 6000), nil)
			close(blocked)
		}()
		synctest.Wait()
		select {
		case <-blocked:
			t.Fatal("output beyond the limit did not block")
		default:
		}
		o.close()
		synctest.Wait()
		select {
		case <-blocked:
		default:
			t.Fatal("close did not release blocked output")
		}
	})
}

func TestOutboxRetireAndContinue(t *testing.T) {
	o := newOutbox(1<<20, 0, nil, slog.Default())
	k := attempt.Key{TaskID: "t", Attempt: 1}
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_QUEUED), nil) // a rejection
	if b := o.nextBatch(flushBytes, flushEvents); len(b) != 1 || b[0].GetSeq() != 1 {
		t.Fatalf("batch %v", b)
	}
	o.ack(k, 1)
	if len(o.running()) != 0 {
		t.Fatal("an acked rejection is still reported")
	}
	if o.ended(k) {
		t.Fatal("a rejected attempt counts as having run")
	}
	// Assigned again: seq continues after the stored rejection.
	ev := statusEvent("t", podiumv1.TaskState_TASK_STATE_PROVISIONING)
	o.add(ev, nil)
	if ev.GetSeq() != 2 {
		t.Fatalf("seq %d, want 2", ev.GetSeq())
	}
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_SUCCEEDED), nil)
	o.ack(k, 3)
	if !o.ended(k) {
		t.Fatal("a finished attempt is not remembered as finished")
	}
}

// A new stream re-sends what was not acknowledged; so does a stream on which
// acks stop coming for longer than the stall time. The test runs in a
// synctest bubble: its clock moves only by the sleep that is the stall, so
// the stall is exact and takes no time.
func TestOutboxResendAfterReconnectAndStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOutbox(1<<20, 0, nil, slog.Default())
		k := attempt.Key{TaskID: "t", Attempt: 1}
		for range 5 {
			o.add(logEvent("t", 10), nil)
		}
		if b := o.nextBatch(flushBytes, 2); len(b) != 2 {
			t.Fatalf("batch of %d, want the 2 asked for", len(b))
		}
		if b := o.nextBatch(flushBytes, flushEvents); len(b) != 3 || b[0].GetSeq() != 3 {
			t.Fatalf("second batch %v", b)
		}
		o.ack(k, 2)
		o.resetSent() // a new stream
		if b := o.nextBatch(flushBytes, flushEvents); len(b) != 3 || b[0].GetSeq() != 3 {
			t.Fatalf("after reconnect %v, want seq 3..5 again", b)
		}
		time.Sleep(10 * time.Millisecond) // no ack comes: the stall
		if o.rewindStalled(time.Hour) {
			t.Fatal("rewound before the stall time")
		}
		if !o.rewindStalled(time.Millisecond) {
			t.Fatal("stalled events not rewound")
		}
		if b := o.nextBatch(flushBytes, flushEvents); len(b) != 3 {
			t.Fatalf("after a stall %v, want seq 3..5 again", b)
		}
	})
}

func TestOutboxForget(t *testing.T) {
	o := newOutbox(1<<20, 0, nil, slog.Default())
	k := attempt.Key{TaskID: "t", Attempt: 1}
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_RUNNING), nil)
	o.forget(k, true)
	o.add(logEvent("t", 10), nil)
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_CANCELLED), nil)
	if b := o.nextBatch(flushBytes, flushEvents); len(b) != 0 {
		t.Fatalf("a forgotten attempt sent %v", b)
	}
	if len(o.forgotten) != 0 {
		t.Fatal("the tombstone outlived the attempt's final event")
	}
}

func noteEvent(task string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: task, Attempt: 1, Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: "artifact a: upload failed"}}}
}

// Notes may follow the terminal status (an artifact upload that failed after
// the task ended): they are sent, numbered on, and the attempt stays ended,
// whether or not its terminal status was already acknowledged.
func TestOutboxNotesAfterTheEnd(t *testing.T) {
	dir := t.TempDir()
	sp, _, err := spool.Open(dir, spool.Options{Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	o := newOutbox(1<<20, 0, sp, slog.Default())
	k := attempt.Key{TaskID: "t", Attempt: 1}
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_PROVISIONING), nil)
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_SUCCEEDED), nil)
	o.add(noteEvent("t"), nil) // before the terminal status is acknowledged
	if o.active(k) || !o.ended(k) {
		t.Fatal("a note after the terminal status made the attempt active again")
	}
	// A restart now finds the attempt ended, not one to resume.
	copyDir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "t-1.spool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyDir, "t-1.spool"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	sp2, attempts, err := spool.Open(copyDir, spool.Options{Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || !attempts[0].Final || !attempts[0].Ended || attempts[0].LastSeq != 3 {
		t.Fatalf("the spool reads back %+v, want an ended attempt with last seq 3", attempts)
	}
	_ = sp2.Close()

	if b := o.nextBatch(flushBytes, flushEvents); len(b) != 3 {
		t.Fatalf("batch %v", b)
	}
	o.ack(k, 3)
	if !o.empty() {
		t.Fatal("the attempt was not retired once everything was acknowledged")
	}
	// After it was retired: numbered on, sent, and retired again.
	ev := noteEvent("t")
	o.add(ev, nil)
	if ev.GetSeq() != 4 || o.active(k) || !o.ended(k) {
		t.Fatalf("seq %d, active %v, ended %v; want 4, an ended attempt", ev.GetSeq(), o.active(k), o.ended(k))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the note of a retired attempt was spooled: %v; alone it would read as a running attempt", entries)
	}
	if b := o.nextBatch(flushBytes, flushEvents); len(b) != 1 || b[0].GetSeq() != 4 {
		t.Fatalf("batch %v", b)
	}
	o.ack(k, 4)
	if !o.empty() || !o.ended(k) {
		t.Fatal("the late note's attempt was not retired again")
	}

	// A note for an attempt the node does not know (one the coordinator
	// disowned) goes nowhere.
	o.add(noteEvent("other"), nil)
	if !o.empty() || len(o.running()) != 0 {
		t.Fatal("a note for an unknown attempt was kept")
	}
}

// After a restart the outbox knows nothing of an attempt whose terminal status
// an earlier process had stored; continueAfter lets the notes of its resumed
// artifact uploads go out numbered after the seq the executor recorded, kept
// in memory only. An attempt the spool still holds keeps its own numbering.
func TestOutboxContinueAfter(t *testing.T) {
	dir := t.TempDir()
	sp, _, err := spool.Open(dir, spool.Options{Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	o := newOutbox(1<<20, 0, sp, slog.Default())
	k := attempt.Key{TaskID: "t", Attempt: 1}
	o.continueAfter(k, 7)
	ev := noteEvent("t")
	o.add(ev, nil)
	if ev.GetSeq() != 8 || o.active(k) || !o.ended(k) {
		t.Fatalf("seq %d, active %v, ended %v; want 8, an ended attempt", ev.GetSeq(), o.active(k), o.ended(k))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the note was spooled: %v; alone it would read as a running attempt", entries)
	}
	if b := o.nextBatch(flushBytes, flushEvents); len(b) != 1 || b[0].GetSeq() != 8 {
		t.Fatalf("batch %v", b)
	}
	o.ack(k, 8)
	if !o.empty() {
		t.Fatal("the attempt was not retired once its note was acknowledged")
	}

	held := attempt.Key{TaskID: "h", Attempt: 1}
	o.add(statusEvent("h", podiumv1.TaskState_TASK_STATE_SUCCEEDED), nil)
	o.continueAfter(held, 40)
	ev = noteEvent("h")
	o.add(ev, nil)
	if ev.GetSeq() != 2 {
		t.Fatalf("the note of an attempt the outbox holds got seq %d, want 2", ev.GetSeq())
	}
}

// stored says whether the coordinator has an attempt's events up to a seq:
// not before their ack, yes after it, and yes once the attempt is retired
// (everything acknowledged) and the outbox holds nothing of it.
func TestOutboxStored(t *testing.T) {
	t.Parallel()
	o := newOutbox(1<<20, 0, nil, slog.Default())
	k := attempt.Key{TaskID: "t", Attempt: 1}
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_RUNNING), nil)
	o.add(logEvent("t", 10), nil)
	o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_SUCCEEDED), nil)
	if o.stored(k, 3) {
		t.Fatal("the terminal status counts as stored before any ack")
	}
	o.ack(k, 2)
	if !o.stored(k, 2) || o.stored(k, 3) {
		t.Fatalf("acked up to 2: stored(2) %t, stored(3) %t; want true, false", o.stored(k, 2), o.stored(k, 3))
	}
	o.ack(k, 3)
	if !o.empty() || !o.stored(k, 3) {
		t.Fatalf("everything acked: the outbox holds the attempt %t, stored(3) %t; want it retired and stored", !o.empty(), o.stored(k, 3))
	}
}

// A task whose output fills every batch must not keep another task's events
// waiting: an assignment's acceptance (its PROVISIONING status) held behind
// a flood is revoked at the coordinator's ack deadline, and a bystander's
// output would reach its follower only once the flood ends. Each batch
// starts with the next task in turn, so every task goes out within a batch
// or two however much the others have to send.
func TestOutboxFloodDoesNotHoldBackOtherTasks(t *testing.T) {
	o := newOutbox(64<<20, 0, nil, slog.Default())
	for range 1000 {
		o.add(logEvent("flood", 16<<10), nil)
	}
	o.add(statusEvent("bystander", podiumv1.TaskState_TASK_STATE_PROVISIONING), nil)
	for i := range 2 {
		for _, ev := range o.nextBatch(flushBytes, flushEvents) {
			if ev.GetTaskId() == "bystander" {
				return
			}
		}
		// The flood keeps its backlog: more of it is added after each batch.
		for range 4 {
			o.add(logEvent("flood", 16<<10), nil)
		}
		t.Logf("batch %d held only the flood's output", i+1)
	}
	t.Fatal("two batches went out without the bystander's acceptance: a task with a backlog holds the others back")
}
