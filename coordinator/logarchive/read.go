package logarchive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrReplaced means the archive a reader was given is no longer there: it was
// replaced by a newer one (or the task is gone) since the task was read. Read
// the task again and continue from the position already reached.
var ErrReplaced = errors.New("the task's log archive was replaced since the task was read")

// Reader reads tasks' archived logs, from the object store or Postgres.
type Reader struct {
	store   *store.Store
	objects *artifacts.Service
}

// NewReader returns a Reader. objects may be nil (no object store): an
// archive in the object store is then an error that says so.
func NewReader(st *store.Store, objects *artifacts.Service) *Reader {
	return &Reader{store: st, objects: objects}
}

// Events calls fn, in order, for each event of task taskID's archive a whose
// position is past after. The archive's bytes are checked against its
// recorded size and SHA-256 before any of it is decoded: a mismatch is an
// ErrDamaged error naming the object, and fn has seen nothing of it. The
// events are decoded one at a time as fn takes them.
func (r *Reader) Events(ctx context.Context, taskID string, a store.LogArchive, after int64,
	fn func(seq int64, ev *podiumv1.TaskEvent) error) error {
	if !a.Archived() {
		return nil
	}
	src, closeSrc, err := r.open(ctx, taskID, a)
	if err != nil {
		return err
	}
	defer closeSrc()
	d, err := NewDecoder(src)
	if err != nil {
		return r.damaged(taskID, a, err)
	}
	defer d.Close()
	for {
		seq, ev, err := d.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return r.damaged(taskID, a, err)
		}
		if int64(seq) > a.Seq {
			return r.damaged(taskID, a, fmt.Errorf("%w: it holds position %d, past the %d recorded", ErrDamaged, seq, a.Seq))
		}
		if int64(seq) <= after {
			continue
		}
		ev.TaskId = taskID
		if err := fn(int64(seq), ev); err != nil {
			return err
		}
	}
}

// where names an archive for an error.
func where(taskID string, a store.LogArchive) string {
	if a.Key != nil {
		return "object " + *a.Key
	}
	return "the row of podium.task_log_archives of task " + taskID
}

func (r *Reader) damaged(taskID string, a store.LogArchive, err error) error {
	return fmt.Errorf("task %s: %s: %w; the events it held cannot be read", taskID, where(taskID, a), err)
}

// open returns the archive's compressed bytes, checked against what the task
// records.
func (r *Reader) open(ctx context.Context, taskID string, a store.LogArchive) (io.Reader, func(), error) {
	if a.Key == nil {
		data, err := r.store.LogArchiveData(ctx, taskID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, ErrReplaced
		}
		if err != nil {
			return nil, nil, err
		}
		sp := newSpool()
		_, _ = sp.Write(data)
		if err := r.check(taskID, a, sp); err != nil {
			return nil, nil, err
		}
		return bytes.NewReader(data), func() {}, nil
	}
	if !r.objects.ObjectsEnabled() {
		return nil, nil, fmt.Errorf("task %s: its log is archived in the object store (%s), but this coordinator has none configured: "+
			"start it with the same --s3-endpoint and --s3-bucket as the one that archived it", taskID, *a.Key)
	}
	obj, _, err := r.objects.GetObject(ctx, *a.Key)
	if errors.Is(err, artifacts.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w (%v)", ErrReplaced, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("task %s: read its log archive: %w", taskID, err)
	}
	defer obj.Close()
	sp := newSpool()
	// One byte past the recorded size is enough to tell it is too long,
	// without spooling an object of any size.
	if _, err := io.Copy(sp, io.LimitReader(obj, *a.Size+1)); err != nil {
		_ = sp.Close()
		return nil, nil, fmt.Errorf("task %s: read its log archive, object %s: %w", taskID, *a.Key, r.objects.ReadFailed(err))
	}
	if err := r.check(taskID, a, sp); err != nil {
		_ = sp.Close()
		return nil, nil, err
	}
	rd, err := sp.Reader()
	if err != nil {
		_ = sp.Close()
		return nil, nil, err
	}
	return rd, func() { _ = sp.Close() }, nil
}

func (r *Reader) check(taskID string, a store.LogArchive, sp *spool) error {
	if sp.Size() != *a.Size || sp.SHA256() != *a.SHA256 {
		size := fmt.Sprint(sp.Size())
		if sp.Size() > *a.Size {
			size = "more than " + fmt.Sprint(*a.Size)
		}
		return fmt.Errorf("task %s: %s: %w: it is %s bytes with SHA-256 %s, the task records %d bytes with SHA-256 %s; "+
			"the events it held cannot be read (restore the object from a backup, or `podium task get` shows what is recorded)",
			taskID, where(taskID, a), ErrDamaged, size, sp.SHA256(), *a.Size, *a.SHA256)
	}
	return nil
}
