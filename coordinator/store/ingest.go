package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrNotHeld means a node sent events for a task attempt it does not hold.
var ErrNotHeld = errors.New("store: the node does not hold this task attempt")

// IngestResult says what an ingest did.
type IngestResult struct {
	// Acked is the high-water mark of stored node seqs for the attempt.
	Acked uint64
	// Stored is how many events were new.
	Stored int
	// Terminal is the terminal state the task reached in this ingest, if any.
	Terminal string
	// Requeued is set when the node gave the task back.
	Requeued bool
	// Bytes is how much task output was stored.
	Bytes int
}

// IngestEvents stores a batch of one task attempt's events from the node that
// holds it, in one transaction. It is idempotent on (task, attempt, seq): only
// the events right after the stored high-water mark are taken, in order, so a
// batch re-sent after a reconnect stores nothing twice and a gap stops the
// ingest until the missing events arrive. Status changes go through
// TransitionTask in the same transaction, so the log and the task's state
// never disagree.
//
// The node's row is read FOR SHARE against the session epoch: a new session
// for the node (which bumps the epoch) waits for this write to commit, and a
// replica that has lost the node writes nothing.
func (s *Store) IngestEvents(ctx context.Context, nodeID string, epoch int64, taskID string, attempt int32,
	events []*podiumv1.TaskEvent) (IngestResult, error) {
	var res IngestResult
	sort.Slice(events, func(i, j int) bool { return events[i].GetSeq() < events[j].GetSeq() })
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		res = IngestResult{}
		var cur int64
		err := tx.QueryRow(ctx, "select session_epoch from podium.nodes where id = $1 for share", nodeID).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if cur != epoch {
			return ErrStaleEpoch
		}
		var acked int64
		err = tx.QueryRow(ctx, `select acked_seq from podium.attempts
			where task_id = $1 and attempt = $2 and node_id = $3 for update`, taskID, attempt, nodeID).Scan(&acked)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotHeld
		}
		if err != nil {
			return err
		}
		var take []*podiumv1.TaskEvent
		next := uint64(acked) + 1
		for _, ev := range events {
			if ev.GetSeq() < next {
				continue
			}
			if ev.GetSeq() > next {
				break
			}
			take = append(take, ev)
			next++
		}
		res.Acked = next - 1
		if len(take) == 0 {
			return nil
		}
		for _, ev := range take {
			if err := ingestOne(ctx, tx, taskID, attempt, ev, &res); err != nil {
				return err
			}
		}
		res.Stored = len(take)
		for _, ev := range take {
			res.Bytes += len(ev.GetLog().GetData())
		}
		_, err = tx.Exec(ctx, "update podium.attempts set acked_seq = $3 where task_id = $1 and attempt = $2",
			taskID, attempt, int64(res.Acked))
		return err
	})
	return res, err
}

func ingestOne(ctx context.Context, tx pgx.Tx, taskID string, attempt int32, ev *podiumv1.TaskEvent, res *IngestResult) error {
	at := time.Now()
	if ev.GetTime() != nil {
		at = ev.GetTime().AsTime()
	}
	switch b := ev.GetBody().(type) {
	case *podiumv1.TaskEvent_Log:
		kind := "stdout"
		if b.Log.GetStream() == podiumv1.LogStream_LOG_STREAM_STDERR {
			kind = "stderr"
		}
		seq, err := nextSeqs(ctx, tx, taskID, 1)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into podium.task_events (task_id, seq, attempt, node_seq, at, kind, log_offset, data)
			values ($1, $2, $3, $4, $5, $6, $7, $8)`,
			taskID, seq, attempt, int64(ev.GetSeq()), at, kind, int64(b.Log.GetOffset()), b.Log.GetData())
		return err
	case *podiumv1.TaskEvent_Note:
		seq, err := nextSeqs(ctx, tx, taskID, 1)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into podium.task_events (task_id, seq, attempt, node_seq, at, kind, text)
			values ($1, $2, $3, $4, $5, 'note', $6)`, taskID, seq, attempt, int64(ev.GetSeq()), at, b.Note.GetText())
		return err
	case *podiumv1.TaskEvent_Status:
		return ingestStatus(ctx, tx, taskID, attempt, ev, b.Status, res)
	default:
		return fmt.Errorf("event %d of task %s has no body", ev.GetSeq(), taskID)
	}
}

// allowedFrom is the lifecycle: for each state a node may report, the states
// the task may be in for that report to move it.
var allowedFrom = map[string][]string{
	Provisioning: {Scheduled},
	Running:      {Scheduled, Provisioning},
	Succeeded:    Active,
	Failed:       Active,
	Cancelled:    Active,
	// A node gives back a task it has no slot for by reporting it queued.
	Queued: {Scheduled, Provisioning},
}

func ingestStatus(ctx context.Context, tx pgx.Tx, taskID string, attempt int32, ev *podiumv1.TaskEvent,
	st *podiumv1.StatusChange, res *IngestResult) error {
	to := StateName(st.GetState())
	from, ok := allowedFrom[to]
	if !ok {
		return AppendNote(ctx, tx, taskID, attempt, fmt.Sprintf("ignored a status %q the node may not report", to))
	}
	reason := st.GetReason()
	if to == Cancelled {
		// A task the control plane stopped for running past its timeout failed;
		// the node only knows it was told to stop.
		var why *string
		if err := tx.QueryRow(ctx, "select cancel_reason from podium.tasks where id = $1", taskID).Scan(&why); err != nil {
			return err
		}
		if why != nil && *why == "timeout" {
			to, reason = Failed, "timeout"
			from = allowedFrom[Failed]
		}
	}
	moved, err := TransitionTask(ctx, tx, Transition{
		TaskID: taskID, From: from, To: to, Attempt: attempt,
		Reason: &reason, ExitCode: st.ExitCode, Signal: st.GetSignal(),
	})
	if err != nil {
		return err
	}
	if !moved {
		var cur string
		if err := tx.QueryRow(ctx, "select state from podium.tasks where id = $1", taskID).Scan(&cur); err != nil {
			return err
		}
		return AppendNote(ctx, tx, taskID, attempt,
			fmt.Sprintf("ignored a late %q from the node: the task is already %s", to, cur))
	}
	seq, err := nextSeqs(ctx, tx, taskID, 1)
	if err != nil {
		return err
	}
	at := time.Now()
	if ev.GetTime() != nil {
		at = ev.GetTime().AsTime()
	}
	if _, err := tx.Exec(ctx, `insert into podium.task_events
			(task_id, seq, attempt, node_seq, at, kind, state, reason, exit_code, signal)
			values ($1, $2, $3, $4, $5, 'status', $6, $7, $8, $9)`,
		taskID, seq, attempt, int64(ev.GetSeq()), at, to, reason, st.ExitCode, st.GetSignal()); err != nil {
		return err
	}
	if Terminal(to) || to == Queued {
		if _, err := tx.Exec(ctx, "update podium.attempts set finished_at = now() where task_id = $1 and attempt = $2",
			taskID, attempt); err != nil {
			return err
		}
	}
	if Terminal(to) {
		res.Terminal = to
	}
	if to == Queued {
		res.Requeued = true
	}
	return nil
}

// AckedSeq returns the stored high-water mark of an attempt held by a node, and
// false when the node does not hold that attempt (any more).
func (s *Store) AckedSeq(ctx context.Context, nodeID, taskID string, attempt int32) (uint64, bool, error) {
	var acked int64
	var state string
	err := s.Pool.QueryRow(ctx, `select a.acked_seq, t.state from podium.attempts a
		join podium.tasks t on t.id = a.task_id and t.attempt = a.attempt and t.node_id = a.node_id
		where a.task_id = $1 and a.attempt = $2 and a.node_id = $3`, taskID, attempt, nodeID).Scan(&acked, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return uint64(acked), !Terminal(state), nil
}
