package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/podiumhq/podium/internal/taskspec"
)

// KeyedSubmit is what SubmitKeyed did: the task as stored, and whom to ring
// once it has committed.
type KeyedSubmit struct {
	Task Task
	// Cancelled are the tasks the submit cancelled (the older ones under
	// cancel_older, the new one under cancel_newer): their followers are
	// rung.
	Cancelled []string
	// NotifyNodes were sent cancel commands.
	NotifyNodes []string
}

// SubmitKeyed stores a task whose spec has a concurrency key with on_conflict
// cancel_older or cancel_newer, and settles the conflict in the same
// transaction, under the key's advisory lock (the one the dispatch pass
// takes), so that what it counts is what the pass sees:
//
//   - cancel_newer: if the key already has limit tasks queued or active, the
//     new task is stored cancelled, never having run, its reason naming them.
//   - cancel_older: the oldest of the key's queued and active tasks are
//     cancelled until the new one fits within the limit, each with a reason
//     naming the new task. One still running stays active until its node
//     reports it stopped, so the new task waits for it and the limit holds.
//     Only tasks the submitter may cancel are: anyone's when anyOwner (an
//     admin), else only those t.RequestedBy submitted. Someone else's task
//     is left alone, and the new task waits for the key as under queue.
//
// cancel_newer cancels only the task submitted, the submitter's own, so it
// is the same for everyone.
//
// Such a submit is its own transaction rather than part of a group commit:
// it is rarer, and its answer depends on the key's other tasks.
func (s *Store) SubmitKeyed(ctx context.Context, t NewTask, anyOwner bool) (KeyedSubmit, error) {
	c := t.Spec.GetConcurrency()
	if c.GetKey() == "" {
		return KeyedSubmit{}, errors.New("SubmitKeyed needs a spec with a concurrency key")
	}
	var out KeyedSubmit
	var err error
	// A pass holding one of the key's tasks can wait on the key's lock while
	// this waits on that task's row; Postgres ends one of the two, and a
	// pass is retried by the scheduler, a submit here.
	for range 3 {
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			out, err = submitKeyed(ctx, tx, t, anyOwner)
			return err
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" {
			break
		}
	}
	return out, err
}

func submitKeyed(ctx context.Context, tx pgx.Tx, t NewTask, anyOwner bool) (KeyedSubmit, error) {
	var out KeyedSubmit
	c := t.Spec.GetConcurrency()
	key, limit := c.GetKey(), int(max(c.GetLimit(), 1))
	// The key's rows first, then its lock: a pass takes its rows before the
	// lock too, so neither waits on the other for both.
	const others = `select id, cancel_requested_at is not null, requested_by from podium.tasks
		where concurrency_key = $1 and state in ('queued', 'scheduled', 'provisioning', 'running')
		order by created_at, id`
	if _, err := tx.Exec(ctx, others+" for update", key); err != nil {
		return out, err
	}
	if _, err := tx.Exec(ctx, lockKey, key); err != nil {
		return out, err
	}
	var held []string
	// stopping are those already being cancelled: they still hold the key
	// until their nodes say they stopped, but are not cancelled twice.
	stopping := map[string]bool{}
	// mayCancel are those the submitter may cancel: all for an admin, their
	// own for anyone else (as TaskService.Cancel decides).
	mayCancel := map[string]bool{}
	rows, err := tx.Query(ctx, others, key)
	if err != nil {
		return out, err
	}
	var id, owner string
	var cancelling bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &cancelling, &owner}, func() error {
		held = append(held, id)
		stopping[id] = cancelling
		mayCancel[id] = anyOwner || (owner != "" && owner == t.RequestedBy)
		return nil
	}); err != nil {
		return out, err
	}
	stored, err := insertTaskRows(ctx, tx, []NewTask{t})
	if err != nil {
		return out, err
	}
	out.Task = stored[0]
	switch c.GetOnConflict() {
	case taskspec.OnConflictCancelNewer:
		if len(held) < limit {
			return out, nil
		}
		reason := fmt.Sprintf("on_conflict cancel_newer: concurrency key %s is at its limit (%d queued or running: %s)",
			key, len(held), taskspec.NameTasks(held))
		cancelled, err := cancelInTx(ctx, tx, out.Task.ID, reason)
		if err != nil {
			return out, err
		}
		out.Task = cancelled.Task
		out.Cancelled = []string{out.Task.ID}
	case taskspec.OnConflictCancelOlder:
		// Room for the new task: limit-1 of the others may stay. The oldest
		// the submitter may cancel go; someone else's task is passed over
		// (a member's), and the new one then waits for it.
		excess := len(held) - limit + 1
		for _, id := range held {
			if excess <= 0 {
				break
			}
			switch {
			case stopping[id]:
				// Being cancelled already, whoever asked: it makes room.
				excess--
				continue
			case !mayCancel[id]:
				continue
			}
			excess--
			reason := fmt.Sprintf("superseded by %s (concurrency key %s, on_conflict cancel_older)", out.Task.ID, key)
			res, err := cancelInTx(ctx, tx, id, reason)
			if err != nil {
				return out, err
			}
			out.Cancelled = append(out.Cancelled, id)
			if res.NotifyNode != "" {
				out.NotifyNodes = append(out.NotifyNodes, res.NotifyNode)
			}
		}
	}
	return out, nil
}

// KeyHolder is a task holding a slot of a concurrency key.
type KeyHolder struct {
	TaskID, RequestedBy, State string
}

// MaxKeyHolders bounds what KeyHolders reads: a key's limit is usually
// small, and a person asking whom they wait for needs the first few.
const MaxKeyHolders = 100

// KeyHolders lists the tasks holding key's slots now (placed: scheduled,
// provisioning or running, as the dispatch pass counts them), in the order
// they were placed, at most MaxKeyHolders.
func (s *Store) KeyHolders(ctx context.Context, key string) ([]KeyHolder, error) {
	rows, err := s.pool.Query(ctx, `select id, requested_by, state from podium.tasks
		where concurrency_key = $1 and state in ('scheduled', 'provisioning', 'running')
		order by scheduled_at, id limit $2`, key, MaxKeyHolders)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyHolder, error) {
		var h KeyHolder
		err := r.Scan(&h.TaskID, &h.RequestedBy, &h.State)
		return h, err
	})
}
