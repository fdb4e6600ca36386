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
//
// Such a submit is its own transaction rather than part of a group commit:
// it is rarer, and its answer depends on the key's other tasks.
func (s *Store) SubmitKeyed(ctx context.Context, t NewTask) (KeyedSubmit, error) {
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
			out, err = submitKeyed(ctx, tx, t)
			return err
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" {
			break
		}
	}
	return out, err
}

func submitKeyed(ctx context.Context, tx pgx.Tx, t NewTask) (KeyedSubmit, error) {
	var out KeyedSubmit
	c := t.Spec.GetConcurrency()
	key, limit := c.GetKey(), int(max(c.GetLimit(), 1))
	// The key's rows first, then its lock: a pass takes its rows before the
	// lock too, so neither waits on the other for both.
	const others = `select id, cancel_requested_at is not null from podium.tasks
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
	rows, err := tx.Query(ctx, others, key)
	if err != nil {
		return out, err
	}
	var id string
	var cancelling bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &cancelling}, func() error {
		held = append(held, id)
		stopping[id] = cancelling
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
		// Room for the new task: limit-1 of the others may stay.
		for _, id := range held[:max(len(held)-limit+1, 0)] {
			if stopping[id] {
				continue
			}
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
