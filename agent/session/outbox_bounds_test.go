package session

import (
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// blocks reports whether add(ev, cur) blocks, in a synctest bubble; a blocked
// add is left to be released by the caller (an ack, or close).
func blocks(o *outbox, ev *podiumv1.TaskEvent, cur []byte) (bool, <-chan struct{}) {
	done := make(chan struct{})
	go func() {
		o.add(ev, cur)
		close(done)
	}()
	synctest.Wait()
	select {
	case <-done:
		return false, done
	default:
		return true, done
	}
}

// A sidecar's lines are output like the task's own: once the outbox is full
// they wait (they carry a cursor, so the executor stops reading the sidecar's
// log). Status changes and the run's own notes (no cursor) never wait, so a
// task can always end. Each event counts its overhead, so a flood of tiny
// notes is bounded like a few big chunks.
func TestOutboxHoldsSidecarLinesNotStatusOrOwnNotes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutbox(10*eventOverhead, 0, nil, slog.Default())
		defer o.close() // releases whatever a failed check left held
		k := attempt.Key{TaskID: "t", Attempt: 1}
		o.add(statusEvent("t", podiumv1.TaskState_TASK_STATE_RUNNING), nil)
		cur := []byte(`{"task":{"file":16}}`)
		n := 0
		for {
			held, done := blocks(o, noteEvent("t"), cur)
			if held {
				if n < 5 || n > 10 {
					t.Fatalf("the %dth tiny note was held back; the bound of 10 overheads holds 5 to 10 of them", n+1)
				}
				if b, _ := blocks(o, noteEvent("t"), nil); b {
					t.Fatal("a note of the run's own (no cursor) was held back")
				}
				if b, _ := blocks(o, statusEvent("t", podiumv1.TaskState_TASK_STATE_SUCCEEDED), nil); b {
					t.Fatal("a status change was held back")
				}
				o.ack(k, o.running()[0].GetLastSeq())
				synctest.Wait()
				select {
				case <-done:
				default:
					t.Fatal("an ack did not release a held note")
				}
				return
			}
			n++
		}
	})
}

// The spool's bound holds output back too, and an ack that compacts the
// spool back under it lets the output go on.
func TestOutboxHoldsOutputAtTheSpoolBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		const bound = 256 << 10
		sp, _, err := spool.Open(dir, spool.Options{MaxBytes: bound, Logger: slog.Default()})
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		o := newOutbox(1<<30, bound, sp, slog.Default()) // memory is no bound here
		defer o.close()
		k := attempt.Key{TaskID: "t", Attempt: 1}
		o.begin(&podiumv1.Assign{TaskId: "t", Attempt: 1})
		cur := []byte(`{"task":{"file":16}}`)
		var last uint64
		for {
			ev := logEvent("t", 16<<10)
			held, done := blocks(o, ev, cur)
			if held {
				if sp.Size() <= bound {
					t.Fatalf("output held back with the spool at %d bytes, under its bound of %d", sp.Size(), bound)
				}
				o.ack(k, last)
				synctest.Wait()
				select {
				case <-done:
				default:
					t.Fatal("an ack did not release output held at the spool's bound")
				}
				if sp.Size() > bound {
					t.Fatalf("the spool holds %d bytes after everything but one event was acknowledged; want it compacted under %d", sp.Size(), bound)
				}
				return
			}
			last = ev.GetSeq()
			if sp.Size() > 2*bound {
				t.Fatalf("the spool grew to %d bytes without holding output back", sp.Size())
			}
		}
	})
}
