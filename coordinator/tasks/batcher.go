package tasks

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/groupcommit"
	"github.com/podiumhq/podium/coordinator/store"
)

// maxBatch caps the tasks one flush stores. Past a few hundred rows the fixed
// cost of a statement and its commit is already spread thin, and a bigger
// batch only makes every caller in it wait for the slowest row.
const maxBatch = 256

// ErrStopped is what a Submit gets once the service has stopped storing tasks,
// at shutdown.
var ErrStopped = errors.New("this coordinator replica is shutting down and takes no new tasks: submit again (to another replica, or once this one is back)")

// newSubmits group-commits submits. Each Submit used to be its own insert and
// its own notify, and Postgres serialises notifying commits, so concurrent
// submitters queued behind one another one commit at a time. Now callers hand
// their task to one writer and wait for their own row, and the writer stores
// everything waiting in one statement (store.InsertTasks), so a lone submit
// costs what it did before and a crowd shares commits.
func newSubmits(st *store.Store) *groupcommit.Batcher[store.NewTask, store.Task] {
	return groupcommit.New(groupcommit.Config[store.NewTask, store.Task]{
		Flush:     st.InsertTasks,
		MaxWeight: maxBatch,
	})
}

// submit stores one task with whichever others are waiting and returns its row.
// A caller whose context ends stops waiting; if its task had already been
// taken, it may still be stored, as when a client disconnects after an insert.
func (s *Service) submit(ctx context.Context, t store.NewTask) (store.Task, error) {
	stored, err := s.submits.Do(ctx, t)
	switch {
	case err == nil:
		return stored, nil
	case errors.Is(err, groupcommit.ErrStopped):
		return store.Task{}, connect.NewError(connect.CodeUnavailable, ErrStopped)
	case ctx.Err() != nil:
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return store.Task{}, connect.NewError(code, fmt.Errorf(
			"gave up waiting for the store; the task may have been stored all the same (`podium tasks` lists it): %w", ctx.Err()))
	default:
		return store.Task{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store the task: %w", err))
	}
}
