// Package logarchive moves a finished task's log out of podium.task_events
// into one compressed archive, and reads it back.
//
// Every byte a task prints is a row of task_events; kept forever, they are
// most of the database. Once a task is terminal and late artifact notes are
// in, its log does not change, so the leader's Job writes it as one zstd
// object (format.go) next to the task's artifacts, and in one transaction
// records it on the task and deletes the rows (store.RecordArchives). The
// object is written first: a replica that dies before the transaction leaves
// the rows as the truth and an object with a deterministic key that the next
// pass overwrites. Without an object store the archive is a compressed row
// of podium.task_log_archives instead.
//
// Readers (coordinator/tasks' Events and the console) take the archive up to
// the task's log_archived_seq and rows after it (Reader.ReadLog); something appended to an
// archived task's log stays a row, and puts the task back in the job's queue
// to be folded into a new archive.
package logarchive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Defaults and bounds of Config.
const (
	// DefaultAfter is artifacts' default upload grace (10 min) and a minute:
	// the notes of late artifact uploads are in before the log is archived.
	DefaultAfter = 11 * time.Minute
	// MaxAfter bounds After: a log kept as rows for longer than a year is
	// better served by turning the archive off.
	MaxAfter     = 365 * 24 * time.Hour
	DefaultBatch = 50
	MaxBatch     = 1000
	// DefaultParallel is how many archive objects of a batch are put at
	// once: a put is mostly waiting for the object store's round trip; one
	// at a time, the job fell behind a dispatcher running tasks of 10 KiB of
	// output on two cores.
	DefaultParallel = 4
	MaxParallel     = 32
	DefaultInterval = 10 * time.Second
	DefaultBackoff  = time.Minute
)

// Config tunes the job. Zero values take the defaults.
type Config struct {
	// Disabled turns archiving off (--log-archive=false): logs then stay
	// rows of task_events, and the table grows with every task forever.
	Disabled bool
	// After is how long after a task ended its log is archived
	// (DefaultAfter; at most MaxAfter).
	After time.Duration
	// Batch is how many tasks one pass takes (DefaultBatch; at most MaxBatch).
	Batch int
	// Parallel is how many of their archives are put in the object store
	// at once (DefaultParallel; at most MaxParallel).
	Parallel int
	// Interval is how often the job looks for work when it found none
	// (DefaultInterval); a full batch is followed by the next at once.
	Interval time.Duration
	// MaxBackoff bounds the wait between tries while the object store or
	// Postgres fails (DefaultBackoff).
	MaxBackoff time.Duration
	// AfterPut, when set, is called after an archive object is written and
	// before it is recorded; an error there abandons the task for this pass,
	// as a replica dying at that point would. For tests.
	AfterPut func(taskID, key string) error
}

// Check refuses a configuration out of bounds, saying which flag.
func (c Config) Check() error {
	if c.After < 0 || c.After > MaxAfter {
		return fmt.Errorf("--archive-after %v: want 0 to %v (default %v); to keep logs as rows, turn --log-archive off", c.After, MaxAfter, DefaultAfter)
	}
	if c.Batch < 0 || c.Batch > MaxBatch {
		return fmt.Errorf("log archive batch %d: want 1 to %d", c.Batch, MaxBatch)
	}
	if c.Parallel < 0 || c.Parallel > MaxParallel {
		return fmt.Errorf("log archive parallelism %d: want 1 to %d", c.Parallel, MaxParallel)
	}
	if c.Interval < 0 || c.MaxBackoff < 0 {
		return errors.New("log archive intervals must not be negative")
	}
	return nil
}

func (c *Config) defaults() {
	if c.After == 0 {
		c.After = DefaultAfter
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultBackoff
	}
}

// Deps are what the job works with.
type Deps struct {
	Store *store.Store
	// Objects is the object store archives go to; nil, or one not
	// configured, keeps them in Postgres.
	Objects *artifacts.Service
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// Job archives terminal tasks' logs. It is a leader.Worker: one replica runs
// it at a time (two, briefly, at a hand-over, which RecordArchives makes
// harmless).
type Job struct {
	cfg    Config
	deps   Deps
	reader *Reader
	// failing is set while passes fail, so that an outage is logged once.
	failing bool
}

// New returns the job; cfg must have passed Check.
func New(cfg Config, deps Deps) *Job {
	cfg.defaults()
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Job{cfg: cfg, deps: deps, reader: NewReader(deps.Store, deps.Objects)}
}

// Run archives until ctx ends, then returns nil. While the object store or
// Postgres fails it logs once, backs off (up to MaxBackoff) and tries again;
// nothing is deleted that was not archived.
func (j *Job) Run(ctx context.Context) error {
	if j.cfg.Disabled {
		<-ctx.Done()
		return nil
	}
	var backoff time.Duration
	for {
		n, err := j.Pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := j.cfg.Interval
		switch {
		case err != nil:
			if !j.failing {
				j.deps.Log.Warn("log archive: paused, retrying with backoff; nothing is deleted until an archive is stored", "err", err)
				j.failing = true
			}
			backoff = min(max(2*backoff, time.Second), j.cfg.MaxBackoff)
			wait = backoff
		case n >= j.cfg.Batch:
			wait = 0
		}
		if err == nil {
			if j.failing {
				j.deps.Log.Info("log archive: resumed")
			}
			j.failing, backoff = false, 0
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Pass archives one batch of due tasks and says how many it took. A failure
// to reach the object store or Postgres ends the pass with that error; a task
// whose log cannot be archived (its previous archive is damaged) is logged
// and left in the queue.
//
// The pass reads the logs of all its tasks in one query (store.ArchiveEvents)
// and compresses them one after the other as the rows come, puts the objects
// Parallel at a time, and records all it wrote in one transaction
// (store.RecordArchives): per task, a query, a transaction and its commit's
// flush were what kept the job behind dispatch. At most Parallel archives
// wait for their put, and one is being compressed: memory stays bounded
// whatever the batch and the logs' sizes.
func (j *Job) Pass(ctx context.Context) (int, error) {
	cs, err := j.deps.Store.ArchiveCandidates(ctx, j.cfg.After, j.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("choose tasks to archive: %w", err)
	}
	var todo []store.ArchiveCandidate
	for _, c := range cs {
		if c.LastSeq <= c.Archive.Seq {
			if err := j.deps.Store.MarkArchived(ctx, c); err != nil {
				return len(cs), fmt.Errorf("mark the log of task %s archived: %w", c.ID, err)
			}
			continue
		}
		todo = append(todo, c)
	}
	p := &pass{j: j, ctx: ctx, byID: make(map[string]store.ArchiveCandidate, len(todo))}
	p.puts.SetLimit(j.cfg.Parallel)
	for _, c := range todo {
		p.byID[c.ID] = c
	}
	err = j.deps.Store.ArchiveEvents(ctx, todo, p.event)
	if err != nil {
		err = fmt.Errorf("read the logs to archive: %w", err)
	} else {
		err = p.finish()
	}
	// The tasks with no row left to read (all their events are in their
	// archive, or retention removed them since) are archived from what they
	// have, so that the pass decides about every task it took.
	for _, c := range todo {
		if err != nil {
			break
		}
		if !p.seen[c.ID] {
			if err = p.start(c); err == nil {
				err = p.finish()
			}
		}
	}
	p.abandon()
	err = errors.Join(err, p.puts.Wait())
	// What was written is recorded even when the pass failed further on.
	return len(cs), errors.Join(err, p.record())
}

// maxPendingData bounds the archives kept in Postgres (no object store) that
// a pass holds in memory before it records them.
const maxPendingData = 64 << 20

// pass is one Pass's archives on their way: the one being written from the
// rows, those being put, and those written.
type pass struct {
	j    *Job
	ctx  context.Context
	byID map[string]store.ArchiveCandidate
	seen map[string]bool
	// cur is the archive being written; nil between tasks, or when its
	// task is skipped for this pass.
	cur     *archiving
	curID   string
	puts    errgroup.Group
	mu      sync.Mutex
	written []store.ArchiveRecord
	pending int64
}

type archiving struct {
	c   store.ArchiveCandidate
	sp  *spool
	enc *Encoder
}

// event takes one row of the pass's tasks' logs, which come by task.
func (p *pass) event(taskID string, e store.StoredEvent) error {
	if taskID != p.curID {
		if err := p.finish(); err != nil {
			return err
		}
		c, ok := p.byID[taskID]
		if !ok {
			return fmt.Errorf("task %s: read rows of a task the pass did not take", taskID)
		}
		if err := p.start(c); err != nil {
			return err
		}
	}
	if p.cur == nil {
		return nil
	}
	if err := p.cur.enc.Write(uint64(e.Seq), e.Event); err != nil {
		p.skip(fmt.Errorf("%w: task %s: %v", errUnarchivable, taskID, err))
	}
	return nil
}

// start begins task c's archive with the events of its previous archive.
func (p *pass) start(c store.ArchiveCandidate) error {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	p.seen[c.ID], p.curID = true, c.ID
	sp := newSpool()
	enc, err := NewEncoder(sp)
	if err != nil {
		_ = sp.Close()
		return err
	}
	p.cur = &archiving{c: c, sp: sp, enc: enc}
	err = p.j.reader.Events(p.ctx, c.ID, c.Archive, 0, func(seq int64, ev *podiumv1.TaskEvent) error {
		if err := enc.Write(uint64(seq), ev); err != nil {
			return fmt.Errorf("%w: task %s: %v", errUnarchivable, c.ID, err)
		}
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrReplaced):
		p.abandon() // another pass moved it; the next one starts again
	case errors.Is(err, ErrDamaged), errors.Is(err, errUnarchivable):
		p.skip(err)
	default:
		p.abandon()
		return err
	}
	return nil
}

// skip logs why the current task's log cannot be archived and leaves it.
func (p *pass) skip(err error) {
	p.j.deps.Log.Error("log archive: cannot archive this task's log; it stays as it is", "task", p.curID, "err", err)
	p.abandon()
}

// abandon drops the current archive, if any.
func (p *pass) abandon() {
	if p.cur == nil {
		return
	}
	_ = p.cur.sp.Close() // a temporary file left behind is the OS's to clean
	p.cur = nil
}

// finish completes the current archive and sends it to the object store, or
// keeps it to be recorded as a row.
func (p *pass) finish() error {
	a := p.cur
	if a == nil {
		return nil
	}
	if err := a.enc.Close(); err != nil {
		p.skip(fmt.Errorf("%w: task %s: %v", errUnarchivable, a.c.ID, err))
		return nil
	}
	p.cur = nil
	rec := store.ArchiveRecord{Candidate: a.c, Size: a.sp.Size(), SHA256: a.sp.SHA256()}
	if !p.j.deps.Objects.ObjectsEnabled() {
		data, err := a.sp.Bytes()
		_ = a.sp.Close()
		if err != nil {
			return err
		}
		rec.Data = data
		p.written = append(p.written, rec)
		if p.pending += int64(len(data)); p.pending > maxPendingData {
			return p.record()
		}
		return nil
	}
	rec.Key = artifacts.LogArchiveKey(a.c.ID, a.c.LastSeq)
	// Go waits while Parallel puts are running: the rows wait with it.
	p.puts.Go(func() error {
		defer a.sp.Close() //nolint:errcheck // a temporary file left behind is the OS's to clean
		r, err := a.sp.Reader()
		if err != nil {
			return err
		}
		if err := p.j.deps.Objects.PutObject(p.ctx, rec.Key, r, rec.Size, "application/zstd"); err != nil {
			return fmt.Errorf("store the log archive of task %s: %w", a.c.ID, err)
		}
		if p.j.cfg.AfterPut != nil {
			if err := p.j.cfg.AfterPut(a.c.ID, rec.Key); err != nil {
				return err
			}
		}
		p.mu.Lock()
		p.written = append(p.written, rec)
		p.mu.Unlock()
		return nil
	})
	return nil
}

// record records the archives written so far, in one transaction.
func (p *pass) record() error {
	p.mu.Lock()
	rs := p.written
	p.written, p.pending = nil, 0
	p.mu.Unlock()
	ok, err := p.j.deps.Store.RecordArchives(p.ctx, rs)
	if err != nil {
		return fmt.Errorf("record %d log archives: %w", len(rs), err)
	}
	for i, r := range rs {
		if ok[i] {
			p.j.deps.Metrics.Archived(r.Size)
		}
	}
	return nil
}

// errUnarchivable marks a log that the format cannot hold (an event past
// MaxRecordBytes).
var errUnarchivable = errors.New("the log cannot be archived")
