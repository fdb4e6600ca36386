package store

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// NewTask is a task to store queued. Its spec must already be valid.
type NewTask struct {
	ID          string
	Spec        *podiumv1.TaskSpec
	RequestedBy string
	// Audit, when set, is the submit's audit row, written in the statement
	// that stores the task (Target is the task's id).
	Audit *Audit
	// RerunOf is the task this one reruns (TaskService.Rerun), "" for none.
	RerunOf string
	// Cost is what the task takes out of a node's budget, stored beside
	// the spec for placement to read. The submit path computes it
	// (tasks.NewRow, from placement.Cost and placement.PidsCost): what a
	// task costs is placement's rule, and the store only records it.
	Cost Cost
	// QueueTimeoutSeconds is how long the task may wait queued for a node
	// each time it is queued, 0 for ever: its spec's queue_timeout, or the
	// coordinator's default when that is 0 (tasks.Defaults). It is stored
	// beside the spec, which keeps what was submitted.
	QueueTimeoutSeconds int64
}

// Cost is a task's cost as stored on its row (podium.tasks cpu, memory_mb,
// pids): its own limits plus every sidecar's.
type Cost struct {
	CPU      float64
	MemoryMB int64
	Pids     int64
}

// insertTasks stores one row per element of its arrays. The name, labels,
// allow_egress, retain_seconds, privileged_sidecars, GPU and share_group columns are
// derived from the spec's own JSON rather than passed: a text[] per row
// cannot go through unnest, and the spec already carries them (protojson
// leaves an empty list out, which array() turns into '{}', and a zero out,
// which coalesce turns into 0).
const insertTasks = `insert into podium.tasks
	(id, spec, priority, labels, cpu, memory_mb, max_attempts, retry_on_node_loss, requested_by,
	 pids, timeout_seconds, output_limit_bytes, allow_egress, retain_seconds, rerun_of, privileged_sidecars,
	 gpus, gpu_model, gpu_memory_mb, concurrency_key, concurrency_limit, share_group,
	 queue_timeout_seconds, queue_deadline, name)
	select id, spec, priority, array(select jsonb_array_elements_text(spec->'labels')),
		cpu, memory_mb, max_attempts, retry_on_node_loss, requested_by,
		pids, timeout_seconds, output_limit_bytes, array(select jsonb_array_elements_text(spec->'allowEgress')),
		coalesce((spec->>'retainSeconds')::bigint, 0), nullif(rerun_of, ''),
		jsonb_path_exists(spec, '$.sidecars[*] ? (@.privileged == true)'),
		coalesce((spec->'resources'->>'gpus')::int, 0), coalesce(spec->'resources'->>'gpuModel', ''),
		coalesce((spec->'resources'->>'gpuMemoryMb')::bigint, 0),
		coalesce(spec->'concurrency'->>'key', ''), coalesce((spec->'concurrency'->>'limit')::int, 0),
		coalesce(spec->>'group', ''),
		queue_timeout, case when queue_timeout > 0 then now() + make_interval(secs => queue_timeout) end,
		nullif(spec->>'name', '')
	from unnest($1::text[], $2::jsonb[], $3::int4[], $4::float8[], $5::int8[], $6::int4[], $7::bool[], $8::text[],
		$10::int8[], $11::int8[], $12::int8[], $17::text[], $18::int8[])
		as t(id, spec, priority, cpu, memory_mb, max_attempts, retry_on_node_loss, requested_by,
		     pids, timeout_seconds, output_limit_bytes, rerun_of, queue_timeout)
	returning ` + insertedColumns

// insertedColumns are taskColumns without the spec: the caller has it already,
// and sending it back and parsing it again (protojson) costs CPU for nothing.
const insertedColumns = `id, state, reason, exit_code, signal, node_id, attempt, priority,
	max_attempts, retry_on_node_loss, requested_by, created_at, scheduled_at, started_at,
	finished_at, cancel_requested_at, last_seq, rerun_of, queue_timeout_seconds, queue_deadline`

// insertTasksAndRing is insertTasks with the scheduler's doorbell in the same
// statement, so a batch is one round trip and one commit. This departs from
// Notify's rule on purpose: Postgres takes the notify lock at commit and holds
// it until the commit is flushed, so ringing apart would hold it over one
// commit per batch all the same (the bell's own) and add a second round trip
// and commit on the single goroutine that flushes batches. Measured with
// other sessions notifying meanwhile, the flusher stored more tasks per second
// this way and the other notifiers were no slower.
//
// The submits' audit rows are written by the same statement (aud), so a task
// and its row commit together.
const insertTasksAndRing = `with ins as (` + insertTasks + `),
	aud as (insert into podium.audit_log (who, role, transport, action, target, result)
		select a.who, a.role, a.transport, a.action, ins.id, 'ok'
		from unnest($1::text[], $13::text[], $14::text[], $15::text[], $16::text[]) as a(id, who, role, transport, action)
		join ins on ins.id = a.id where a.action <> '')
	select ` + insertedColumns + ` from ins cross join (select pg_notify($9, '')) as bell`

// InsertTasks stores tasks queued in one statement and rings ChannelSubmit once
// for all of them, so submitting N tasks at once costs one statement instead
// of 2N. The tasks come back in the order given. Either every task is stored
// or none is.
func (s *Store) InsertTasks(ctx context.Context, ts []NewTask) ([]Task, error) {
	return insertTaskRows(ctx, s.pool, ts)
}

// insertTaskRows is InsertTasks on q: the pool, or a transaction that stores
// more with the tasks (a keyed submit's conflict, a schedule's tick row).
func insertTaskRows(ctx context.Context, q querier, ts []NewTask) ([]Task, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	n := len(ts)
	var (
		ids         = make([]string, n)
		specs       = make([]string, n)
		priorities  = make([]int32, n)
		cpus        = make([]float64, n)
		mems        = make([]int64, n)
		maxAttempts = make([]int32, n)
		retries     = make([]bool, n)
		who         = make([]string, n)
		rerunOf     = make([]string, n)
		pids        = make([]int64, n)
		timeouts    = make([]int64, n)
		outputs     = make([]int64, n)
		queueTimes  = make([]int64, n)
		at          = make(map[string]int, n)
		// The audit rows' columns; action "" for a task without one.
		aWho, aRole, aTransport, aAction = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	)
	for i, t := range ts {
		js, err := protojson.Marshal(t.Spec)
		if err != nil {
			return nil, fmt.Errorf("task %s: encode the spec: %w", t.ID, err)
		}
		if _, dup := at[t.ID]; dup {
			return nil, fmt.Errorf("task %s appears twice in one insert", t.ID)
		}
		at[t.ID] = i
		ids[i], specs[i], who[i], rerunOf[i] = t.ID, string(js), t.RequestedBy, t.RerunOf
		priorities[i], retries[i] = t.Spec.GetPriority(), t.Spec.GetRetryOnNodeLoss()
		cpus[i], mems[i], pids[i] = t.Cost.CPU, t.Cost.MemoryMB, t.Cost.Pids
		timeouts[i], outputs[i], queueTimes[i] = t.Spec.GetTimeoutSeconds(), t.Spec.GetOutputLimitBytes(), t.QueueTimeoutSeconds
		maxAttempts[i] = max(t.Spec.GetMaxAttempts(), 1)
		if a := t.Audit; a != nil {
			aWho[i], aRole[i], aTransport[i], aAction[i] = a.Who, a.Role, a.Transport, a.Action
		}
	}
	rows, err := q.Query(ctx, insertTasksAndRing, ids, specs, priorities, cpus, mems, maxAttempts, retries, who, ChannelSubmit,
		pids, timeouts, outputs, aWho, aRole, aTransport, aAction, rerunOf, queueTimes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]Task, n)
	got := 0
	for rows.Next() {
		var t Task
		err := rows.Scan(&t.ID, &t.State, &t.Reason, &t.ExitCode, &t.Signal, &t.NodeID, &t.Attempt,
			&t.Priority, &t.MaxAttempts, &t.RetryOnNodeLoss, &t.RequestedBy, &t.CreatedAt, &t.ScheduledAt,
			&t.StartedAt, &t.FinishedAt, &t.CancelRequestedAt, &t.LastSeq, &t.RerunOf, &t.QueueTimeoutSeconds, &t.QueueDeadline)
		if err != nil {
			return nil, err
		}
		i, ok := at[t.ID]
		if !ok {
			return nil, fmt.Errorf("insert returned task %s, which was not asked for", t.ID)
		}
		t.Spec = ts[i].Spec
		out[i] = t
		got++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("insert stored %d of %d tasks", got, n)
	}
	for _, t := range ts {
		if t.Audit != nil {
			t.Audit.written.Store(true)
		}
	}
	return out, nil
}
