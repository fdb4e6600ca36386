package logarchive

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// readPage is how many rows of a log one query reads.
const readPage = 500

// ReadLog sends, in order, the events of task t's log whose positions are
// past *after: from its archive, then its rows. *after advances with every
// event sent, so a caller that reads again (following a running task) goes
// on from where this read stopped. It returns the task as last read, which
// is newer than t when the archive job moved the log meanwhile. It is the
// one reading of a task's log, for the API (tasks' Events) and the console.
//
// The archive job may replace an archive, or delete the rows it archived,
// between the reading of t and of its log: a read that finds its archive
// replaced, or comes up short of what t said was stored, reads the task again
// and goes on from the new archive, so no event is missed or sent twice.
// A log that retention took (t.LogExpiredAt) sends nothing.
//
// Errors: what send returns, as it is; an error wrapping store.ErrNotFound
// when the task itself is gone (retention expired it) meanwhile; a
// connect DataLoss error when its archive is damaged or missing; and any
// other failure to read Postgres or the object store as connect Unavailable.
func (r *Reader) ReadLog(ctx context.Context, t store.Task, after *int64, send func(int64, *podiumv1.TaskEvent) error) (store.Task, error) {
	var sendErr error
	sent := func(seq int64, ev *podiumv1.TaskEvent) error {
		if err := send(seq, ev); err != nil {
			sendErr = err
			return err
		}
		*after = seq
		return nil
	}
	reread := func(t store.Task) (store.Task, error) {
		nt, err := r.store.GetTask(ctx, t.ID)
		if errors.Is(err, store.ErrNotFound) {
			return t, fmt.Errorf("task %s: %w", t.ID, err)
		}
		if err != nil {
			return t, connect.NewError(connect.CodeUnavailable, err)
		}
		return nt, nil
	}
	for {
		if t.LogExpiredAt != nil {
			// Retention took the log (and its archive) since t was read.
			return t, nil
		}
		if *after < t.Archive.Seq {
			err := r.Events(ctx, t.ID, t.Archive, *after, sent)
			switch {
			case sendErr != nil:
				return t, sendErr
			case errors.Is(err, ErrReplaced):
				// Replaced by a newer archive since t was read: read t again.
				nt, rerr := reread(t)
				if rerr != nil {
					return t, rerr
				}
				if nt.Archive.Seq == t.Archive.Seq && sameArchive(nt.Archive, t.Archive) {
					return t, connect.NewError(connect.CodeDataLoss, fmt.Errorf("task %s: its log archive is missing: %v", t.ID, err))
				}
				t = nt
				continue
			case errors.Is(err, ErrDamaged):
				return t, connect.NewError(connect.CodeDataLoss, err)
			case err != nil:
				var ce *connect.Error
				if errors.As(err, &ce) || ctx.Err() != nil {
					return t, err
				}
				return t, connect.NewError(connect.CodeUnavailable, err)
			}
			// The archive may end before its last position (a position with
			// no event); the rows start after it.
			*after = max(*after, t.Archive.Seq)
		}
		for {
			evs, err := r.store.ReadEvents(ctx, t.ID, *after, readPage)
			if err != nil {
				return t, connect.NewError(connect.CodeUnavailable, err)
			}
			for _, e := range evs {
				if err := sent(e.Seq, e.Event); err != nil {
					return t, err
				}
			}
			if len(evs) < readPage {
				break
			}
		}
		if *after >= t.LastSeq {
			return t, nil
		}
		// Short of what t said was stored: the archive job may have taken
		// the rows since. If it did, continue from its archive.
		nt, err := reread(t)
		if err != nil {
			return t, err
		}
		if nt.Archive.Seq <= *after {
			return t, nil
		}
		t = nt
	}
}

// sameArchive says whether a and b are the same archive: both in Postgres,
// or both the same object.
func sameArchive(a, b store.LogArchive) bool {
	return (a.Key == nil) == (b.Key == nil) && (a.Key == nil || *a.Key == *b.Key)
}
