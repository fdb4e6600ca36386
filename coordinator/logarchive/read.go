package logarchive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrReplaced means the archive a reader was given is no longer there: it was
// replaced by a newer one (or the task is gone) since the task was read. Read
// the task again and continue from the position already reached.
var ErrReplaced = errors.New("the task's log archive was replaced since the task was read")

// DefaultPageSize is how much of an archive kept in Postgres one query
// reads: a reader holds one page, whatever the archive's size.
const DefaultPageSize = 256 << 10

// Reader reads tasks' archived logs, from the object store or Postgres.
type Reader struct {
	store    *store.Store
	objects  *artifacts.Service
	pageSize int
	// held is the most bytes of an archive in Postgres this reader has
	// held at once (MaxHeld).
	held atomic.Int64
}

// NewReader returns a Reader. objects may be nil (no object store): an
// archive in the object store is then an error that says so.
func NewReader(st *store.Store, objects *artifacts.Service) *Reader {
	return NewReaderPaged(st, objects, DefaultPageSize)
}

// NewReaderPaged is NewReader reading archives kept in Postgres pageSize
// bytes at a time.
func NewReaderPaged(st *store.Store, objects *artifacts.Service, pageSize int) *Reader {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	return &Reader{store: st, objects: objects, pageSize: pageSize}
}

// MaxHeld is the most bytes of an archive kept in Postgres that this reader
// has held in memory at once, over all its reads: one page at most.
func (r *Reader) MaxHeld() int64 { return r.held.Load() }

// pgArchive reads an archive kept in Postgres one page at a time (a
// substring of the value), so a request for a log holds one page of it
// whatever its size. Every page is of the archive with the SHA-256 the task
// was read with; once it is replaced the read ends with ErrReplaced.
type pgArchive struct {
	r      *Reader
	ctx    context.Context
	taskID string
	sha    string
	off    int64
	page   []byte
	eof    bool
}

func (p *pgArchive) Read(b []byte) (int, error) {
	if len(p.page) == 0 {
		if p.eof {
			return 0, io.EOF
		}
		page, err := p.r.store.LogArchivePage(p.ctx, p.taskID, p.sha, p.off, p.r.pageSize)
		if errors.Is(err, store.ErrNotFound) {
			return 0, ErrReplaced
		}
		if err != nil {
			return 0, fmt.Errorf("task %s: read its log archive from Postgres at byte %d: %w", p.taskID, p.off, err)
		}
		for {
			held := p.r.held.Load()
			if int64(len(page)) <= held || p.r.held.CompareAndSwap(held, int64(len(page))) {
				break
			}
		}
		p.off += int64(len(page))
		p.eof = len(page) < p.r.pageSize
		p.page = page
		if len(page) == 0 {
			return 0, io.EOF
		}
	}
	n := copy(b, p.page)
	p.page = p.page[n:]
	return n, nil
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
		// Twice through, a page at a time: once to check its size and
		// SHA-256 before a byte is decoded, then to decode it. Either
		// pass ends with ErrReplaced if the archive is replaced.
		h := newHashCounter()
		if _, err := io.Copy(h, io.LimitReader(&pgArchive{r: r, ctx: ctx, taskID: taskID, sha: *a.SHA256}, *a.Size+1)); err != nil {
			return nil, nil, err
		}
		if err := r.check(taskID, a, h); err != nil {
			return nil, nil, err
		}
		return &pgArchive{r: r, ctx: ctx, taskID: taskID, sha: *a.SHA256}, func() {}, nil
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

// sized is what check compares with what the task records.
type sized interface {
	Size() int64
	SHA256() string
}

// hashCounter hashes and counts what is written to it, and keeps nothing.
type hashCounter struct {
	n int64
	h hash.Hash
}

func newHashCounter() *hashCounter { return &hashCounter{h: sha256.New()} }

func (c *hashCounter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *hashCounter) Size() int64    { return c.n }
func (c *hashCounter) SHA256() string { return hex.EncodeToString(c.h.Sum(nil)) }

func (r *Reader) check(taskID string, a store.LogArchive, sp sized) error {
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
