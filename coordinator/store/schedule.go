package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/placement"
)

// Placement is one task given to one node.
type Placement struct {
	TaskID    string
	NodeID    string
	Attempt   int32
	CreatedAt time.Time
	// Reoffered is set when the attempt was given back by a node before and
	// is placed again under the same number.
	Reoffered bool
}

// Candidates reads the connected nodes with what they are already committed
// to, as placement sees them. It aggregates every active task, so the
// scheduler keeps the result between passes rather than reading it for each.
//
// A node heard from longer than silentFor ago (the unreachable threshold) is
// left out even while its row still says online. The watchdog's verdict lags
// on purpose (after a leader change it gives every node the whole period to
// reconnect), but a task placed in that window on a node that never comes
// back is lost with it; one that does come back is a candidate again at its
// first heartbeat.
func (s *Store) Candidates(ctx context.Context, silentFor time.Duration) ([]*placement.Candidate, error) {
	rows, err := s.pool.Query(ctx, `select n.id, n.labels, n.draining,
			case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end,
			coalesce(t.running, 0) + n.busy_slots, n.cpu_cores, n.memory_mb, coalesce(t.cpu, 0), coalesce(t.mem, 0),
			coalesce(n.last_assigned_at, 'epoch'::timestamptz),
			n.max_cpu, n.max_memory_mb, n.max_pids, n.max_timeout_seconds, n.max_output_bytes, n.permit_egress
		from podium.nodes n
		left join (select node_id, count(*)::int as running, sum(cpu) as cpu, sum(memory_mb)::bigint as mem
		           from podium.tasks where state in ('scheduled', 'provisioning', 'running')
		           group by node_id) t on t.node_id = n.id
		where n.session_replica is not null and n.status = 'online'
		  and n.last_heartbeat_at > now() - make_interval(secs => $1)
		order by n.id`, silentFor.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*placement.Candidate, error) {
		c := &placement.Candidate{}
		var permit []string
		l := &c.Limits
		err := r.Scan(&c.ID, &c.Labels, &c.Draining, &c.SlotLimit, &c.Running, &c.CPUCores, &c.MemoryMB,
			&c.CommittedCPU, &c.CommittedMemMB, &c.LastAssignedAt,
			&l.MaxCPU, &l.MaxMemoryMB, &l.MaxPids, &l.MaxTimeoutSeconds, &l.MaxOutputBytes, &permit)
		l.PermitEgress = placement.ParseEgress(permit)
		return c, err
	})
}

// PlaceFunc says which node a claimed task goes to, or, with nodeID "", why
// it waits. DispatchPass asks it once per task, in the order the tasks are
// claimed, and writes whatever it answers; the choice is the caller's (the
// scheduler, through package placement), so no placement rule lives in SQL.
type PlaceFunc func(taskID string, need placement.Need) (nodeID, why string)

// DispatchPass claims up to batch queued tasks with FOR UPDATE SKIP LOCKED,
// highest priority first, then oldest, then lowest id, asks place where each
// goes, records the placements, and records why the others wait. The order is
// decided here, in the claiming statement, because SKIP LOCKED with a LIMIT
// takes the rows the statement reaches first: ordering afterwards would order
// the wrong tasks. It returns the placements, so the caller can ring each
// node's doorbell after the commit, and how many claimed tasks were left
// waiting. If it fails, nothing was written, though place may have been asked.
// The caller runs it when something says tasks are queued (a doorbell), not
// to find out whether any are.
func (s *Store) DispatchPass(ctx context.Context, batch int, place PlaceFunc) (placed []Placement, waiting int, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		placed, waiting = nil, 0
		rows, err := tx.Query(ctx, `select id, labels, cpu, memory_mb, pids, timeout_seconds, output_limit_bytes,
				allow_egress, attempt, attempt_given_back, max_attempts, reason, created_at from podium.tasks
			where state = 'queued' order by priority desc, created_at, id
			for update skip locked limit $1`, batch)
		if err != nil {
			return err
		}
		type queued struct {
			id          string
			need        placement.Need
			attempt     int32
			givenBack   bool
			maxAttempts int32
			reason      string
			created     time.Time
		}
		qs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queued, error) {
			var q queued
			var egress []string
			err := r.Scan(&q.id, &q.need.Labels, &q.need.CPU, &q.need.MemoryMB, &q.need.Pids, &q.need.TimeoutSeconds,
				&q.need.OutputLimitBytes, &egress, &q.attempt, &q.givenBack, &q.maxAttempts, &q.reason, &q.created)
			q.need.AllowEgress = placement.ParseEgress(egress)
			return q, err
		})
		if err != nil {
			return err
		}
		for _, q := range qs {
			next := nextAttempt(q.attempt, q.givenBack)
			if next > q.maxAttempts {
				// Nothing requeues a task past its last attempt, so only a row
				// written otherwise gets here; it ends rather than running
				// once more than its spec allows.
				if err := exhaust(ctx, tx, q.id, q.attempt, q.maxAttempts); err != nil {
					return err
				}
				continue
			}
			node, why := place(q.id, q.need)
			if node == "" {
				waiting++
				if why != q.reason {
					if _, err := tx.Exec(ctx, "update podium.tasks set reason = $2 where id = $1", q.id, why); err != nil {
						return err
					}
				}
				continue
			}
			placed = append(placed, Placement{TaskID: q.id, NodeID: node, Attempt: next, CreatedAt: q.created, Reoffered: next == q.attempt})
		}
		if len(placed) == 0 {
			return nil
		}
		return recordPlacements(ctx, tx, placed)
	})
	return placed, waiting, err
}

// nextAttempt is the attempt number a queued task's next placement gets: the
// next one, unless a node gave the current one back without running it
// ("no free slot", draining), in which case it is offered again under the
// same number. A given-back assignment is not an attempt: it uses up none of
// max_attempts and adds no row to podium.attempts.
func nextAttempt(attempt int32, givenBack bool) int32 {
	if givenBack && attempt > 0 {
		return attempt
	}
	return attempt + 1
}

// exhaust fails a queued task that has used every attempt its spec allows,
// saying so in its log, and rings its followers at the commit.
func exhaust(ctx context.Context, tx pgx.Tx, id string, attempt, maxAttempts int32) error {
	reason := fmt.Sprintf("not placed again: all %d attempts used", maxAttempts)
	moved, err := transitionTask(ctx, tx, Transition{TaskID: id, From: []string{Queued}, To: Failed, Reason: &reason})
	if err != nil || !moved {
		return err
	}
	if err := appendStatus(ctx, tx, id, attempt, Failed, reason, nil, 0); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "select pg_notify($1, $2)", ChannelTaskEvents, id)
	return err
}

// recordPlacements writes a pass's placements with one statement per table
// rather than five per task: the leader's round trips to Postgres, not the
// work in them, are what bound dispatch. The tasks were claimed FOR UPDATE, so
// extending each one's log position here cannot race another writer.
func recordPlacements(ctx context.Context, tx pgx.Tx, placed []Placement) error {
	n := len(placed)
	ids, nodes, reasons := make([]string, n), make([]string, n), make([]string, n)
	attempts := make([]int32, n)
	for i, p := range placed {
		ids[i], nodes[i], attempts[i], reasons[i] = p.TaskID, p.NodeID, p.Attempt, "assigned to "+p.NodeID
	}
	rows, err := tx.Query(ctx, `update podium.tasks t set state = 'scheduled', node_id = u.node, attempt = u.attempt,
			attempt_given_back = false, scheduled_at = now(), reason = '', last_seq = t.last_seq + 1
		from unnest($1::text[], $2::text[], $3::int[]) as u(id, node, attempt)
		where t.id = u.id returning t.id, t.last_seq`, ids, nodes, attempts)
	if err != nil {
		return err
	}
	seqOf := map[string]int64{}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return err
		}
		seqOf[id] = seq
	}
	if err := rows.Err(); err != nil {
		return err
	}
	seqs := make([]int64, n)
	for i, id := range ids {
		seqs[i] = seqOf[id]
	}
	b := &pgx.Batch{}
	// An attempt given back is offered again under its number: its row is
	// moved to the new node, keeping the events already stored of it
	// (acked_seq, which the assignment tells the node to number after).
	b.Queue(`insert into podium.attempts (task_id, attempt, node_id)
		select * from unnest($1::text[], $2::int[], $3::text[])
		on conflict (task_id, attempt) do update set node_id = excluded.node_id, assigned_at = now(), finished_at = null`,
		ids, attempts, nodes)
	b.Queue(`insert into podium.node_commands (node_id, kind, task_id, attempt)
		select n, 'assign', t, a from unnest($1::text[], $2::text[], $3::int[]) as u(n, t, a)`, nodes, ids, attempts)
	b.Queue(`insert into podium.task_events (task_id, seq, attempt, kind, state, reason)
		select t, s, a, 'status', 'scheduled', r from unnest($1::text[], $2::bigint[], $3::int[], $4::text[]) as u(t, s, a, r)`,
		ids, seqs, attempts, reasons)
	b.Queue("update podium.nodes set last_assigned_at = now() where id = any($1)", nodes)
	return tx.SendBatch(ctx, b).Close()
}

// CancelOutcome says what a cancel did.
type CancelOutcome struct {
	Task Task
	// NotifyNode is the node that was sent a cancel command, "" if none.
	NotifyNode string
}

// CancelTask cancels a task. A queued task ends cancelled at once, without
// running. A task held by a node gets a cancel command; it ends when the node
// reports it stopped. A finished task is left as it is.
func (s *Store) CancelTask(ctx context.Context, id, reason string) (CancelOutcome, error) {
	var out CancelOutcome
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = CancelOutcome{}
		t, err := scanTask(tx.QueryRow(ctx, "select "+taskColumns+" from podium.tasks where id = $1 for update", id))
		if err != nil {
			if err == pgx.ErrNoRows {
				return ErrNotFound
			}
			return err
		}
		switch {
		case t.State == Queued:
			r := "cancelled before it ran: " + reason
			if _, err := transitionTask(ctx, tx, Transition{TaskID: id, From: []string{Queued}, To: Cancelled, Reason: &r}); err != nil {
				return err
			}
			if err := appendStatus(ctx, tx, id, t.Attempt, Cancelled, r, nil, 0); err != nil {
				return err
			}
		case slices.Contains(Active, t.State) && t.NodeID != nil:
			if t.CancelRequestedAt == nil {
				if _, err := tx.Exec(ctx, "update podium.tasks set cancel_requested_at = now(), cancel_reason = $2 where id = $1", id, reason); err != nil {
					return err
				}
			}
			if err := insertCommand(ctx, tx, Command{NodeID: *t.NodeID, Kind: "cancel", TaskID: id, Attempt: t.Attempt, Reason: reason}); err != nil {
				return err
			}
			if err := appendNote(ctx, tx, id, t.Attempt, "cancel requested: "+reason); err != nil {
				return err
			}
			out.NotifyNode = *t.NodeID
		}
		out.Task, err = getTask(ctx, tx, id)
		return err
	})
	return out, err
}

// loseTask applies the node-loss policy to a task its node no longer has: a new
// attempt when the spec allows re-running it and attempts remain, otherwise
// lost. It first writes a note into the task's own log so the user reading it
// learns what happened. A task that has meanwhile left its active states is
// left alone.
func loseTask(ctx context.Context, tx pgx.Tx, t Task, why string) (requeued bool, err error) {
	if !t.RetryOnNodeLoss || t.Attempt >= t.MaxAttempts {
		reason := why
		if t.RetryOnNodeLoss {
			reason += fmt.Sprintf("; not retried: all %d attempts used", t.MaxAttempts)
		}
		moved, err := transitionTask(ctx, tx, Transition{TaskID: t.ID, From: Active, To: Lost, Attempt: t.Attempt, Reason: &reason})
		if err != nil || !moved {
			return false, err
		}
		if err := appendNote(ctx, tx, t.ID, t.Attempt, "node lost: "+why); err != nil {
			return false, err
		}
		return false, appendStatus(ctx, tx, t.ID, t.Attempt, Lost, reason, nil, 0)
	}
	reason := why + "; requeued"
	moved, err := transitionTask(ctx, tx, Transition{TaskID: t.ID, From: Active, To: Queued, Attempt: t.Attempt, Reason: &reason})
	if err != nil || !moved {
		return false, err
	}
	if _, err := tx.Exec(ctx, "update podium.attempts set finished_at = now() where task_id = $1 and attempt = $2", t.ID, t.Attempt); err != nil {
		return false, err
	}
	return true, appendNote(ctx, tx, t.ID, t.Attempt, fmt.Sprintf("node lost: %s; requeued for attempt %d of %d", why, t.Attempt+1, t.MaxAttempts))
}

// tasksOnNode lists the tasks the control plane holds on a node.
func tasksOnNode(ctx context.Context, q querier, nodeID string) ([]Task, error) {
	rows, err := q.Query(ctx, "select "+taskColumns+` from podium.tasks
		where node_id = $1 and state in ('scheduled', 'provisioning', 'running') order by id`, nodeID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
}

// ReconcileNode settles, in one transaction, the tasks the control plane
// holds on a node against the ones the node reported when its stream opened
// (task id → attempt), and returns the tasks it gave up on. A held task the
// node reported at the same attempt is left alone. One still scheduled that
// the node did not report never reached it (the assign was lost with the old
// stream): its assign command is marked undelivered, so the node's delivery
// loop sends it again, rather than the task losing an attempt it never began.
// One past scheduled that the node did not report went down with the node's
// previous life: the node-loss policy applies (loseTask: a new attempt, or
// lost), and its id is returned so the caller can ring its watchers. What the
// node reported that the control plane does not hold there counts as the
// node's busy slots.
func (s *Store) ReconcileNode(ctx context.Context, nodeID string, reported map[string]int32) (lost []string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		lost = nil
		held, err := tasksOnNode(ctx, tx, nodeID)
		if err != nil {
			return err
		}
		// What the node reported that the control plane does not hold there
		// is being torn down on it, each in a slot: busy until the node's
		// own heartbeats say the teardown ended (see FlushHeartbeats).
		busy := 0
		for id, a := range reported {
			if !slices.ContainsFunc(held, func(t Task) bool { return t.ID == id && t.Attempt == a }) {
				busy++
			}
		}
		if _, err := tx.Exec(ctx, "update podium.nodes set busy_slots = $2 where id = $1", nodeID, busy); err != nil {
			return err
		}
		for _, t := range held {
			if a, ok := reported[t.ID]; ok && a == t.Attempt {
				continue
			}
			if t.State == Scheduled {
				if _, err := tx.Exec(ctx, `update podium.node_commands set delivered_at = null
					where node_id = $1 and task_id = $2 and attempt = $3 and kind = 'assign'`, nodeID, t.ID, t.Attempt); err != nil {
					return err
				}
				continue
			}
			if _, err := loseTask(ctx, tx, t, fmt.Sprintf("node %s came back without the task", nodeID)); err != nil {
				return err
			}
			lost = append(lost, t.ID)
		}
		return nil
	})
	return lost, err
}
