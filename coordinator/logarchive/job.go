// Package logarchive moves a finished task's log out of podium.task_events
// into one compressed archive, and reads it back.
//
// Every byte a task prints is a row of task_events; kept forever, they are
// most of the database. Once a task is terminal and late artifact notes are
// in, its log does not change, so the leader's Job writes it as one zstd
// object (format.go) next to the task's artifacts, and in one transaction
// records it on the task and deletes the rows (store.RecordArchive). The
// object is written first: a replica that dies before the transaction leaves
// the rows as the truth and an object with a deterministic key that the next
// pass overwrites. Without an object store the archive is a compressed row
// of podium.task_log_archives instead.
//
// Readers (coordinator/tasks' Events) take the archive up to the task's
// log_archived_seq and rows after it (Reader); something appended to an
// archived task's log stays a row, and puts the task back in the job's queue
// to be folded into a new archive.
package logarchive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// DefaultParallel is how many tasks of a batch are archived at once. One
	// archive is mostly waiting (a read, an object store round trip, a
	// commit's flush); one at a time, the job fell behind a dispatcher
	// running tasks of 10 KiB of output on two cores.
	DefaultParallel = 4
	MaxParallel     = 32
	DefaultInterval = 10 * time.Second
	DefaultBackoff  = time.Minute
	// readPage is how many rows are read from task_events at a time.
	readPage = 500
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
	// Parallel is how many of them are archived at once (DefaultParallel;
	// at most MaxParallel).
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
// it at a time (two, briefly, at a hand-over, which RecordArchive makes
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
func (j *Job) Pass(ctx context.Context) (int, error) {
	cs, err := j.deps.Store.ArchiveCandidates(ctx, j.cfg.After, j.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("choose tasks to archive: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(j.cfg.Parallel)
	for _, c := range cs {
		g.Go(func() error {
			err := j.archive(gctx, c)
			switch {
			case err == nil:
			case errors.Is(err, ErrDamaged), errors.Is(err, errUnarchivable):
				j.deps.Log.Error("log archive: cannot archive this task's log; it stays as it is", "task", c.ID, "err", err)
			default:
				return err
			}
			return nil
		})
	}
	return len(cs), g.Wait()
}

// errUnarchivable marks a log that the format cannot hold (an event past
// MaxRecordBytes).
var errUnarchivable = errors.New("the log cannot be archived")

// archive writes one task's log, its previous archive and the rows after it,
// as one archive, stores it and records it.
func (j *Job) archive(ctx context.Context, c store.ArchiveCandidate) error {
	if c.LastSeq <= c.Archive.Seq {
		return j.deps.Store.MarkArchived(ctx, c)
	}
	sp := newSpool()
	defer sp.Close() //nolint:errcheck // a temporary file left behind is the OS's to clean
	enc, err := NewEncoder(sp)
	if err != nil {
		return err
	}
	write := func(seq int64, ev *podiumv1.TaskEvent) error {
		if err := enc.Write(uint64(seq), ev); err != nil {
			return fmt.Errorf("%w: task %s: %v", errUnarchivable, c.ID, err)
		}
		return nil
	}
	if err := j.reader.Events(ctx, c.ID, c.Archive, 0, write); err != nil {
		if errors.Is(err, ErrReplaced) {
			return nil // another pass moved it; the next one starts again
		}
		return err
	}
	// The rows up to LastSeq were all committed when LastSeq was: a task's
	// rows and its last_seq are written in one transaction. Rows past it (a
	// note since) are left for the next pass.
	for after, done := c.Archive.Seq, false; !done; {
		evs, err := j.deps.Store.ReadEvents(ctx, c.ID, after, readPage)
		if err != nil {
			return fmt.Errorf("read the log of task %s: %w", c.ID, err)
		}
		done = len(evs) < readPage
		for _, e := range evs {
			if e.Seq > c.LastSeq {
				done = true
				break
			}
			if err := write(e.Seq, e.Event); err != nil {
				return err
			}
			after = e.Seq
		}
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("%w: task %s: %v", errUnarchivable, c.ID, err)
	}
	rec := store.ArchiveRecord{Candidate: c, Size: sp.Size(), SHA256: sp.SHA256()}
	if j.deps.Objects.ObjectsEnabled() {
		rec.Key = artifacts.LogArchiveKey(c.ID, c.LastSeq)
		r, err := sp.Reader()
		if err != nil {
			return err
		}
		if err := j.deps.Objects.PutObject(ctx, rec.Key, r, sp.Size(), "application/zstd"); err != nil {
			return fmt.Errorf("store the log archive of task %s: %w", c.ID, err)
		}
		if j.cfg.AfterPut != nil {
			if err := j.cfg.AfterPut(c.ID, rec.Key); err != nil {
				return err
			}
		}
	} else if rec.Data, err = sp.Bytes(); err != nil {
		return err
	}
	ok, err := j.deps.Store.RecordArchive(ctx, rec)
	if err != nil {
		return fmt.Errorf("record the log archive of task %s: %w", c.ID, err)
	}
	if ok {
		j.deps.Metrics.Archived(sp.Size())
	}
	return nil
}
