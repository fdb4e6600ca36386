package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/store"
)

// maxBatch caps the tasks one flush stores. Past a few hundred rows the fixed
// cost of a statement and its commit is already spread thin, and a bigger
// batch only makes every caller in it wait for the slowest row.
const maxBatch = 256

// flushTimeout bounds one flush. It does not end with the service's context:
// a flush that has begun finishes, so its callers get the real outcome rather
// than a shutdown error for tasks that were in fact stored.
const flushTimeout = 10 * time.Second

// ErrStopped is what a Submit gets once the service has stopped storing tasks,
// at shutdown.
var ErrStopped = errors.New("this coordinator replica is shutting down and takes no new tasks: submit again (to another replica, or once this one is back)")

// batcher group-commits submits. Each Submit used to be its own insert and its
// own notify, and Postgres serialises notifying commits, so concurrent
// submitters queued behind one another one commit at a time. Instead, callers
// hand their task to one flusher and wait for their own row; the flusher
// stores everything that is waiting in one statement. It never lingers to let
// a batch grow: while one flush runs the next batch gathers by itself, so a
// lone submit costs what it did before and a crowd shares commits.
type batcher struct {
	store *store.Store
	// in is unbuffered: a task is either taken by the flusher, which then
	// answers it, or never taken, and its caller knows which.
	in      chan pending
	stopped chan struct{}
}

type pending struct {
	task store.NewTask
	done chan<- stored // buffered, so the flusher never waits on a caller
}

type stored struct {
	task store.Task
	err  error
}

func newBatcher(st *store.Store) *batcher {
	return &batcher{store: st, in: make(chan pending), stopped: make(chan struct{})}
}

// run flushes batches until ctx ends. Call it once.
func (b *batcher) run(ctx context.Context) {
	defer close(b.stopped)
	batch := make([]pending, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case p := <-b.in:
			batch = append(batch, p)
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case p := <-b.in:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		b.flush(ctx, batch)
	}
}

func (b *batcher) flush(ctx context.Context, batch []pending) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	ts := make([]store.NewTask, len(batch))
	for i, p := range batch {
		ts[i] = p.task
	}
	out, err := b.store.InsertTasks(ctx, ts)
	for i, p := range batch {
		if err != nil {
			p.done <- stored{err: connect.NewError(connect.CodeUnavailable, fmt.Errorf("store the task: %w", err))}
			continue
		}
		p.done <- stored{task: out[i]}
	}
}

// submit stores one task with whichever others are waiting and returns its row.
// A caller whose context ends stops waiting; if the flusher had already taken
// its task, the task may still be stored, as when a client disconnects after an
// insert.
func (b *batcher) submit(ctx context.Context, t store.NewTask) (store.Task, error) {
	done := make(chan stored, 1)
	select {
	case b.in <- pending{task: t, done: done}:
	case <-b.stopped:
		return store.Task{}, connect.NewError(connect.CodeUnavailable, ErrStopped)
	case <-ctx.Done():
		return store.Task{}, contextError(ctx, "gave up before the task was stored")
	}
	select {
	case r := <-done:
		return r.task, r.err
	case <-ctx.Done():
		return store.Task{}, contextError(ctx, "gave up waiting for the store; the task may have been stored all the same (`podium tasks` lists it)")
	}
}

// contextError says why a caller's wait ended, with the code its context's
// end calls for.
func contextError(ctx context.Context, what string) error {
	code := connect.CodeCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", what, ctx.Err()))
}
