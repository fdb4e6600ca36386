package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Touched is a task a sweep changed, and the node that must hear of it ("" if none).
type Touched struct {
	TaskID string
	NodeID string
}

// ExpireAssignments takes back assignments a node has not accepted within
// deadline: the task goes back to the queue while attempts remain, else it
// fails saying why. The node is sent a cancel in case the assignment reaches it
// late.
func (s *Store) ExpireAssignments(ctx context.Context, deadline time.Duration) ([]Touched, error) {
	var out []Touched
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, "select "+taskColumns+` from podium.tasks
			where state = 'scheduled' and scheduled_at < now() - make_interval(secs => $1)
			order by scheduled_at for update skip locked limit 500`, deadline.Seconds())
		if err != nil {
			return err
		}
		ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
		if err != nil {
			return err
		}
		for _, t := range ts {
			node := *t.NodeID
			why := fmt.Sprintf("node %s did not accept the assignment within %s", node, deadline)
			to, reason := Queued, why+"; requeued"
			if t.Attempt >= t.MaxAttempts {
				to, reason = Failed, fmt.Sprintf("%s; all %d attempts used", why, t.MaxAttempts)
			}
			if _, err := transitionTask(ctx, tx, Transition{TaskID: t.ID, From: []string{Scheduled}, To: to, Attempt: t.Attempt, Reason: &reason}); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "update podium.attempts set finished_at = now() where task_id = $1 and attempt = $2", t.ID, t.Attempt); err != nil {
				return err
			}
			if err := insertCommand(ctx, tx, Command{NodeID: node, Kind: "cancel", TaskID: t.ID, Attempt: t.Attempt, Reason: "assignment revoked: " + why}); err != nil {
				return err
			}
			if err := appendStatus(ctx, tx, t.ID, t.Attempt, to, reason, nil, 0); err != nil {
				return err
			}
			out = append(out, Touched{TaskID: t.ID, NodeID: node})
		}
		return nil
	})
	return out, err
}

// TimeOutTasks asks the node of every task running past its timeout (plus
// margin, since the node enforces the timeout itself and should get there
// first) to stop it. The node's "cancelled" then lands as failed: timeout.
func (s *Store) TimeOutTasks(ctx context.Context, margin time.Duration) ([]Touched, error) {
	var out []Touched
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `select id, node_id, attempt from podium.tasks
			where state = 'running' and cancel_requested_at is null
			  and coalesce((spec->>'timeoutSeconds')::bigint, 0) > 0
			  -- least(): a spec stored before taskspec bounded timeouts to a year
			  -- could hold one whose interval overflows and fails every sweep.
			  and started_at + make_interval(secs => least((spec->>'timeoutSeconds')::bigint, 31536000) + $1) < now()
			for update skip locked limit 500`, margin.Seconds())
		if err != nil {
			return err
		}
		type row struct {
			ID, Node string
			Attempt  int32
		}
		rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return err
		}
		for _, r := range rs {
			if _, err := tx.Exec(ctx, "update podium.tasks set cancel_requested_at = now(), cancel_reason = 'timeout' where id = $1", r.ID); err != nil {
				return err
			}
			if err := insertCommand(ctx, tx, Command{NodeID: r.Node, Kind: "cancel", TaskID: r.ID, Attempt: r.Attempt, Reason: "timeout"}); err != nil {
				return err
			}
			if err := appendNote(ctx, tx, r.ID, r.Attempt, "timeout: the task ran past its timeout; asking its node to stop it"); err != nil {
				return err
			}
			out = append(out, Touched{TaskID: r.ID, NodeID: r.Node})
		}
		return nil
	})
	return out, err
}

// WriteOffCancelled ends a task that was asked to stop more than after ago and
// whose node has no live stream: nobody is left to report that it stopped, and
// a user waiting on the cancel should not wait forever.
func (s *Store) WriteOffCancelled(ctx context.Context, after time.Duration) ([]Touched, error) {
	var out []Touched
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `select t.id, t.node_id, t.attempt, coalesce(t.cancel_reason, '') from podium.tasks t
			join podium.nodes n on n.id = t.node_id
			where t.state in ('scheduled', 'provisioning', 'running')
			  and t.cancel_requested_at < now() - make_interval(secs => $1)
			  and n.session_replica is null
			for update of t skip locked limit 500`, after.Seconds())
		if err != nil {
			return err
		}
		type row struct {
			ID, Node string
			Attempt  int32
			Why      string
		}
		rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return err
		}
		for _, r := range rs {
			to, reason := Cancelled, fmt.Sprintf("written off: cancelled %s ago and its node %s is gone", after, r.Node)
			if r.Why == "timeout" {
				to, reason = Failed, "timeout (written off: its node "+r.Node+" is gone)"
			}
			moved, err := transitionTask(ctx, tx, Transition{TaskID: r.ID, From: Active, To: to, Attempt: r.Attempt, Reason: &reason})
			if err != nil {
				return err
			}
			if !moved {
				continue
			}
			if err := appendStatus(ctx, tx, r.ID, r.Attempt, to, reason, nil, 0); err != nil {
				return err
			}
			out = append(out, Touched{TaskID: r.ID, NodeID: r.Node})
		}
		return nil
	})
	return out, err
}

// EndBackoffs ends the wait of every queued task whose retry backoff
// (not_before) has passed, and says how many there were. The scheduler
// places such a task as soon as a pass runs, but nothing else rings for one
// whose time has come: the leader's sweep calls this and rings the scheduler
// when it is not 0, so a backoff ends within a sweep interval of its time.
// Clearing the column also keeps its index (tasks_backoff) to the tasks
// waiting now.
func (s *Store) EndBackoffs(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `update podium.tasks set not_before = null
		where not_before is not null and not_before <= now() and state = 'queued'`)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ExpireQueued fails every queued task whose queue timeout has passed
// (queue_deadline): it waited that long for a node without one taking it.
// Its reason says how long, whose timeout it was (the spec's queue_timeout
// or the coordinator's --queue-timeout) and why it was waiting, its last
// reason, which may say no node could ever run it.
func (s *Store) ExpireQueued(ctx context.Context) ([]Touched, error) {
	var out []Touched
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `select id, attempt, queue_timeout_seconds, reason,
				coalesce((spec->>'queueTimeoutSeconds')::bigint, 0) > 0
			from podium.tasks
			where state = 'queued' and queue_deadline <= now()
			order by queue_deadline for update skip locked limit 500`)
		if err != nil {
			return err
		}
		type row struct {
			ID      string
			Attempt int32
			Timeout int64
			Last    string
			OwnSpec bool
		}
		rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return err
		}
		for _, r := range rs {
			reason := QueueTimeoutReason(time.Duration(r.Timeout)*time.Second, r.OwnSpec, r.Last)
			moved, err := transitionTask(ctx, tx, Transition{TaskID: r.ID, From: []string{Queued}, To: Failed, Reason: &reason})
			if err != nil {
				return err
			}
			if !moved {
				continue
			}
			if err := appendStatus(ctx, tx, r.ID, r.Attempt, Failed, reason, nil, 0); err != nil {
				return err
			}
			out = append(out, Touched{TaskID: r.ID})
		}
		return nil
	})
	return out, err
}

// QueueTimeoutReason is the reason of a task failed for waiting queued
// longer than its queue timeout: how long, whose timeout (the spec's, or the
// coordinator's when spec is false) and its last reason for waiting.
func QueueTimeoutReason(timeout time.Duration, spec bool, last string) string {
	whose := "the coordinator's --queue-timeout"
	if spec {
		whose = "queue_timeout"
	}
	if last == "" {
		last = "none yet: no dispatch pass had looked at it"
	}
	return fmt.Sprintf("waited %s in the queue without a node (%s); the last reason: %s", timeout, whose, last)
}
