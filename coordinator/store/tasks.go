package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Task states as stored. They match podiumv1.TaskState one for one.
const (
	Queued       = "queued"
	Scheduled    = "scheduled"
	Provisioning = "provisioning"
	Running      = "running"
	Succeeded    = "succeeded"
	Failed       = "failed"
	Cancelled    = "cancelled"
	Lost         = "lost"
)

// Active are the states in which a task is held by a node.
var Active = []string{Scheduled, Provisioning, Running}

// Terminal reports whether a state is one no event may leave.
func Terminal(state string) bool {
	switch state {
	case Succeeded, Failed, Cancelled, Lost:
		return true
	}
	return false
}

var stateToProto = map[string]podiumv1.TaskState{
	Queued: podiumv1.TaskState_TASK_STATE_QUEUED, Scheduled: podiumv1.TaskState_TASK_STATE_SCHEDULED,
	Provisioning: podiumv1.TaskState_TASK_STATE_PROVISIONING, Running: podiumv1.TaskState_TASK_STATE_RUNNING,
	Succeeded: podiumv1.TaskState_TASK_STATE_SUCCEEDED, Failed: podiumv1.TaskState_TASK_STATE_FAILED,
	Cancelled: podiumv1.TaskState_TASK_STATE_CANCELLED, Lost: podiumv1.TaskState_TASK_STATE_LOST,
}

// StateProto converts a stored state to the API's enum.
func StateProto(s string) podiumv1.TaskState { return stateToProto[s] }

// StateName converts the API's enum to a stored state, "" for unspecified.
func StateName(s podiumv1.TaskState) string {
	for k, v := range stateToProto {
		if v == s {
			return k
		}
	}
	return ""
}

// Task is a row of podium.tasks.
type Task struct {
	ID                string
	Spec              *podiumv1.TaskSpec
	State             string
	Reason            string
	ExitCode          *int32
	Signal            int32
	NodeID            *string
	Attempt           int32
	Priority          int32
	MaxAttempts       int32
	RetryOnNodeLoss   bool
	RequestedBy       string
	CreatedAt         time.Time
	ScheduledAt       *time.Time
	StartedAt         *time.Time
	FinishedAt        *time.Time
	CancelRequestedAt *time.Time
	LastSeq           int64
	// Archive is where the task's log up to Archive.Seq is, once archived
	// (archive.go).
	Archive LogArchive
	// LogExpiredAt and ArtifactsExpiredAt say when retention removed the
	// task's log and its artifacts; nil while they are kept.
	LogExpiredAt       *time.Time
	ArtifactsExpiredAt *time.Time
	// RerunOf is the task this one is a rerun of (RerunTask); nil if none.
	RerunOf *string
	// NotBefore is set while the task waits out a retry's backoff: it is
	// queued and not placed before then (0019_retries.sql).
	NotBefore *time.Time
	// ScheduleID is the schedule that created the task (cron.go); nil
	// for a task submitted.
	ScheduleID *string
	// Unschedulable is set while the task is queued and no node could ever
	// run it (the dispatch pass's Verdict); Reason then says why.
	Unschedulable bool
	// QueueTimeoutSeconds is the queue timeout that applies to the task
	// (NewTask.QueueTimeoutSeconds), 0 for none; QueueDeadline is when it
	// fails if still queued then (nil when not queued or without one).
	QueueTimeoutSeconds int64
	QueueDeadline       *time.Time
}

// Proto renders the row for the API.
func (t Task) Proto() *podiumv1.Task {
	p := &podiumv1.Task{
		Id: t.ID, Spec: t.Spec, State: StateProto(t.State), Reason: t.Reason, ExitCode: t.ExitCode,
		Signal: t.Signal, Attempt: t.Attempt, CreatedAt: timestamppb.New(t.CreatedAt),
		RequestedBy: t.RequestedBy, LastSeq: uint64(t.LastSeq),
	}
	if t.NodeID != nil {
		p.NodeId = *t.NodeID
	}
	if t.StartedAt != nil {
		p.StartedAt = timestamppb.New(*t.StartedAt)
	}
	if t.FinishedAt != nil {
		p.FinishedAt = timestamppb.New(*t.FinishedAt)
	}
	p.LogArchive = t.Archive.Proto()
	if t.LogExpiredAt != nil {
		p.LogExpiredAt = timestamppb.New(*t.LogExpiredAt)
	}
	if t.ArtifactsExpiredAt != nil {
		p.ArtifactsExpiredAt = timestamppb.New(*t.ArtifactsExpiredAt)
	}
	if t.RerunOf != nil {
		p.RerunOf = *t.RerunOf
	}
	if t.ScheduleID != nil {
		p.ScheduleId = *t.ScheduleID
	}
	if t.NotBefore != nil && t.State == Queued {
		p.NextAttemptAt = timestamppb.New(*t.NotBefore)
	}
	p.Unschedulable = t.Unschedulable && t.State == Queued
	p.QueueTimeoutSeconds = t.QueueTimeoutSeconds
	if t.QueueDeadline != nil && t.State == Queued {
		p.QueueDeadline = timestamppb.New(*t.QueueDeadline)
	}
	return p
}

const taskColumns = `id, spec, state, reason, exit_code, signal, node_id, attempt, priority,
	max_attempts, retry_on_node_loss, requested_by, created_at, scheduled_at, started_at,
	finished_at, cancel_requested_at, last_seq, log_expired_at, artifacts_expired_at, rerun_of, not_before, schedule_id,
	unschedulable, queue_timeout_seconds, queue_deadline, ` + archiveColumns

func scanTask(row pgx.Row) (Task, error) {
	var t Task
	var spec []byte
	err := row.Scan(&t.ID, &spec, &t.State, &t.Reason, &t.ExitCode, &t.Signal, &t.NodeID, &t.Attempt,
		&t.Priority, &t.MaxAttempts, &t.RetryOnNodeLoss, &t.RequestedBy, &t.CreatedAt, &t.ScheduledAt,
		&t.StartedAt, &t.FinishedAt, &t.CancelRequestedAt, &t.LastSeq, &t.LogExpiredAt, &t.ArtifactsExpiredAt,
		&t.RerunOf, &t.NotBefore, &t.ScheduleID, &t.Unschedulable, &t.QueueTimeoutSeconds, &t.QueueDeadline, &t.Archive.Seq, &t.Archive.Key, &t.Archive.Size, &t.Archive.SHA256, &t.Archive.At)
	if err != nil {
		return t, err
	}
	t.Spec = &podiumv1.TaskSpec{}
	if err := protojson.Unmarshal(spec, t.Spec); err != nil {
		return t, fmt.Errorf("task %s: stored spec does not parse: %w", t.ID, err)
	}
	return t, nil
}

// InsertTask stores one new queued task and rings ChannelSubmit: InsertTasks
// with a batch of one. The spec must already be valid, and t.Cost set for
// a spec that asks for resources (tasks.NewRow).
func (s *Store) InsertTask(ctx context.Context, t NewTask) (Task, error) {
	ts, err := s.InsertTasks(ctx, []NewTask{t})
	if err != nil {
		return Task{}, err
	}
	return ts[0], nil
}

// GetTask reads one task.
func (s *Store) GetTask(ctx context.Context, id string) (Task, error) {
	return getTask(ctx, s.pool, id)
}

func getTask(ctx context.Context, q querier, id string) (Task, error) {
	t, err := scanTask(q.QueryRow(ctx, "select "+taskColumns+" from podium.tasks where id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	return t, err
}

// TaskFilter narrows ListTasks. Every field is optional; the zero value lists
// the newest tasks. The service bounds each field before it gets here.
type TaskFilter struct {
	States      []string
	RequestedBy string
	// Label is one exact spec label ("key" or "key=value").
	Label string
	// Node is the node the task's latest attempt was placed on.
	Node string
	// Name is one exact spec.name.
	Name string
	// Since keeps tasks created at or after it.
	Since time.Time
	// After is a cursor: only tasks older than this one in the list's order
	// (created_at, id descending). A task that no longer exists is an error,
	// ErrNotFound, so that a stale cursor is not read as "no more tasks".
	After string
	// Limit is the most tasks returned; 0 means 100.
	Limit int
}

// listTasksSQL builds ListTasks' statement with only the conditions f asks
// for: a statement with "$n is empty or …" branches gets a generic plan after a
// few runs that cannot use the indexes, so each combination is its own
// statement, and every one of them is served by an index (migration 0026;
// TestListTasksPlansUseIndexes holds that at a million rows).
func listTasksSQL(f TaskFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	switch len(f.States) {
	case 0:
	case 1:
		// Equality, not any(): the planner then reads tasks_state_created
		// in the list's order and stops at the limit.
		where = append(where, "state = "+arg(f.States[0]))
	default:
		where = append(where, "state = any("+arg(f.States)+"::text[])")
	}
	if f.RequestedBy != "" {
		where = append(where, "requested_by = "+arg(f.RequestedBy))
	}
	if f.Label != "" {
		where = append(where, "labels @> array["+arg(f.Label)+"::text]")
	}
	if f.Node != "" {
		where = append(where, "node_id = "+arg(f.Node))
	}
	if f.Name != "" {
		where = append(where, "name = "+arg(f.Name))
	}
	if !f.Since.IsZero() {
		where = append(where, "created_at >= "+arg(f.Since))
	}
	if f.After != "" {
		// The cursor's own row gives the position, so the page boundary is
		// exact even when tasks share a created_at.
		where = append(where, "(created_at, id) < (select created_at, id from podium.tasks where id = "+arg(f.After)+")")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := "select " + taskColumns + " from podium.tasks"
	if len(where) > 0 {
		q += " where " + strings.Join(where, " and ")
	}
	// The limit is written in, not passed: a generic plan guesses an unknown
	// limit at a tenth of the table, which can make a sort look cheaper than
	// the index. It is an int, so nothing can be injected.
	q += fmt.Sprintf(" order by created_at desc, id desc limit %d", limit)
	return q, args
}

// ListTasks lists the tasks f selects, newest first (created_at, then id,
// descending: a stable order, so a cursor pages through without repeats or
// gaps).
func (s *Store) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	if f.After != "" {
		var exists bool
		if err := s.pool.QueryRow(ctx, "select exists (select from podium.tasks where id = $1)", f.After).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, ErrNotFound
		}
	}
	q, args := listTasksSQL(f)
	// An unnamed statement is planned for its values each time, as the
	// plans TestListTasksPlansUseIndexes explains; a cached one would go
	// generic after a few runs, with guesses where the values were.
	rows, err := s.pool.Query(ctx, q, append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
}

// Transition is one allowed move of a task's state.
type Transition struct {
	TaskID string
	// From is every state the task may be in for the move to happen. A task in
	// any other state is left alone: the move is a rejected no-op, not an error,
	// because late and replayed events are routine.
	From []string
	To   string
	// Attempt, when non-zero, also requires the task to be on that attempt, so an
	// event from an attempt that was already given up cannot move the next one.
	Attempt  int32
	Reason   *string
	ExitCode *int32
	Signal   int32
	// RetryAfter, on a move to queued, is a retry's backoff: the task is not
	// placed again before now (the database's clock) plus it. Every other
	// move clears the wait.
	RetryAfter time.Duration
}

// transitionTask is the one function through which a task changes state. It
// reports whether the move was made.
func transitionTask(ctx context.Context, q querier, tr Transition) (bool, error) {
	moved, err := transitionTasks(ctx, q, []Transition{tr})
	if err != nil {
		return false, err
	}
	return moved[0], nil
}

// transitionSQL moves each task named in the unnest whose state is in that
// row's from set (a comma-separated list) and, when the row names an attempt,
// whose attempt is that one. It is the whole of the lifecycle's bookkeeping:
// started_at on the first running of an attempt (cleared on a requeue, so
// the timeout backstop, TimeOutTasks, counts from the start of the attempt
// running now, not the first one), finished_at on a terminal state, node_id
// cleared on a requeue, not_before set by a retry's requeue and cleared by
// every other move (null over null leaves the update HOT), queue_deadline
// set by a move to queued for a task with a queue timeout (counted from the
// end of a retry's backoff) and cleared by every other, and unschedulable
// cleared by every move: only a dispatch pass says a queued task is.
const transitionSQL = `update podium.tasks t set
		state = u.to_state,
		reason = coalesce(u.reason, t.reason),
		exit_code = coalesce(u.exit_code, t.exit_code),
		signal = case when u.signal <> 0 then u.signal else t.signal end,
		started_at = case when u.to_state = 'running' then coalesce(t.started_at, now())
			when u.to_state = 'queued' then null else t.started_at end,
		finished_at = case when u.to_state in ('succeeded', 'failed', 'cancelled', 'lost') then now() else t.finished_at end,
		node_id = case when u.to_state = 'queued' then null else t.node_id end,
		not_before = case when u.to_state = 'queued' and u.retry_ms > 0
			then now() + u.retry_ms * interval '1 millisecond' end,
		queue_deadline = case when u.to_state = 'queued' and t.queue_timeout_seconds > 0
			then now() + u.retry_ms * interval '1 millisecond' + make_interval(secs => t.queue_timeout_seconds) end,
		unschedulable = false
	from unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::int[], $8::int8[])
		as u(id, from_states, to_state, attempt, reason, exit_code, signal, retry_ms)
	where t.id = u.id and t.state = any(string_to_array(u.from_states, ','))
		and (u.attempt = 0 or t.attempt = u.attempt)
	returning t.id`

// transitionArgs are transitionSQL's arguments for trs, whose task ids must
// be distinct: one statement moves a row at most once.
func transitionArgs(trs []Transition) ([]any, error) {
	n := len(trs)
	ids, froms, tos := make([]string, n), make([]string, n), make([]string, n)
	attempts, signals := make([]int32, n), make([]int32, n)
	reasons, exits, retryMS := make([]*string, n), make([]*int32, n), make([]int64, n)
	seen := make(map[string]bool, n)
	for i, tr := range trs {
		if len(tr.From) == 0 {
			return nil, errors.New("store: a transition needs an explicit from set")
		}
		if seen[tr.TaskID] {
			return nil, fmt.Errorf("store: task %s appears twice in one set of transitions; apply them in turn", tr.TaskID)
		}
		seen[tr.TaskID] = true
		ids[i], froms[i], tos[i] = tr.TaskID, strings.Join(tr.From, ","), tr.To
		attempts[i], signals[i], reasons[i], exits[i] = tr.Attempt, tr.Signal, tr.Reason, tr.ExitCode
		retryMS[i] = tr.RetryAfter.Milliseconds()
	}
	return []any{ids, froms, tos, attempts, reasons, exits, signals, retryMS}, nil
}

// transitionTasks applies several transitions, of distinct tasks, in one
// statement, and reports for each whether it was made. It is transitionTask
// for many rows: the same rule, written once.
func transitionTasks(ctx context.Context, q querier, trs []Transition) ([]bool, error) {
	if len(trs) == 0 {
		return nil, nil
	}
	args, err := transitionArgs(trs)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, transitionSQL, args...)
	if err != nil {
		return nil, err
	}
	movedIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return movedFlags(trs, movedIDs), nil
}

func movedFlags(trs []Transition, movedIDs []string) []bool {
	moved := make(map[string]bool, len(movedIDs))
	for _, id := range movedIDs {
		moved[id] = true
	}
	out := make([]bool, len(trs))
	for i, tr := range trs {
		out[i] = moved[tr.TaskID]
	}
	return out
}

// Transition runs transitionTask on its own.
func (s *Store) Transition(ctx context.Context, tr Transition) (bool, error) {
	return transitionTask(ctx, s.pool, tr)
}

// nextSeqs reserves n positions in a task's log. The row lock it takes is what
// orders concurrent writers of one task's log by commit.
//
// It also sets log_archived_at back to null: a line appended to a task whose
// log is archived (a late artifact note) stays a row, past the archive's end,
// until the archive job folds it into a new archive. Writing null over null
// changes no indexed value, so for the usual task, never archived, the update
// stays HOT (0015_log_archive.sql).
func nextSeqs(ctx context.Context, q querier, taskID string, n int) (first int64, err error) {
	var last int64
	err = q.QueryRow(ctx, "update podium.tasks set last_seq = last_seq + $2, log_archived_at = null where id = $1 returning last_seq",
		taskID, n).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	return last - int64(n) + 1, err
}

// appendNote writes one of Podium's own lines into a task's log.
func appendNote(ctx context.Context, q querier, taskID string, attempt int32, text string) error {
	seq, err := nextSeqs(ctx, q, taskID, 1)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `insert into podium.task_events (task_id, seq, attempt, kind, text)
		values ($1, $2, $3, 'note', $4)`, taskID, seq, attempt, text)
	return err
}

// AppendNote writes one of Podium's own lines into a task's log, in a
// transaction of its own.
func (s *Store) AppendNote(ctx context.Context, taskID string, attempt int32, text string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error { return appendNote(ctx, tx, taskID, attempt, text) })
}

func appendStatus(ctx context.Context, q querier, taskID string, attempt int32, state, reason string, exit *int32, signal int32) error {
	seq, err := nextSeqs(ctx, q, taskID, 1)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `insert into podium.task_events (task_id, seq, attempt, kind, state, reason, exit_code, signal)
		values ($1, $2, $3, 'status', $4, $5, $6, $7)`, taskID, seq, attempt, state, reason, exit, signal)
	return err
}

// StoredEvent is an event with its position in the task's log.
type StoredEvent struct {
	Seq   int64
	Event *podiumv1.TaskEvent
}

// ReadEvents returns up to limit events after position after.
func (s *Store) ReadEvents(ctx context.Context, taskID string, after int64, limit int) ([]StoredEvent, error) {
	rows, err := s.pool.Query(ctx, `select `+storedEventColumns+`
		from podium.task_events where task_id = $1 and seq > $2 order by seq limit $3`, taskID, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredEvent, error) {
		return scanEvent(r, taskID)
	})
}

// storedEventColumns are the columns of task_events that scanEvent reads, in its
// order.
const storedEventColumns = `seq, attempt, coalesce(node_seq, 0), at, kind,
	coalesce(log_offset, 0), data, coalesce(state, ''), coalesce(reason, ''), exit_code,
	coalesce(signal, 0), coalesce(text, '')`

// scanEvent reads one row of eventColumns, followed by dest, as task
// taskID's event.
func scanEvent(r pgx.Row, taskID string, dest ...any) (StoredEvent, error) {
	var (
		se                        StoredEvent
		attempt, signal           int32
		nodeSeq, offset           int64
		at                        time.Time
		kind, state, reason, text string
		data                      []byte
		exit                      *int32
	)
	if err := r.Scan(append([]any{&se.Seq, &attempt, &nodeSeq, &at, &kind, &offset, &data, &state, &reason, &exit, &signal, &text}, dest...)...); err != nil {
		return se, err
	}
	ev := &podiumv1.TaskEvent{TaskId: taskID, Seq: uint64(nodeSeq), Attempt: attempt, Time: timestamppb.New(at)}
	switch kind {
	case "stdout", "stderr":
		stream := podiumv1.LogStream_LOG_STREAM_STDOUT
		if kind == "stderr" {
			stream = podiumv1.LogStream_LOG_STREAM_STDERR
		}
		ev.Body = &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: stream, Offset: uint64(offset), Data: data}}
	case "status":
		ev.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
			State: StateProto(state), Reason: reason, ExitCode: exit, Signal: signal}}
	default:
		ev.Body = &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: text}}
	}
	se.Event = ev
	return se, nil
}
