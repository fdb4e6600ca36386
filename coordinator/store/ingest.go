package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protojson"

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
	// Retried is set when the attempt failed and its retry policy put the
	// task back in the queue, to wait out a backoff before the next attempt:
	// the node's slot is free, as after a terminal state.
	Retried bool
	// Bytes is how much task output was stored.
	Bytes int
	// UsageCut says how the usage the node reported with the attempt's end
	// was cut before it was stored, if it was (for the replica's log).
	UsageCut string
	// Lost is how many of the attempt's events the node no longer has and
	// the database no longer has either: its batch started past the stored
	// high-water mark (see IngestBatch). The task's log says so in a note.
	Lost int
}

// IngestItem is a batch of one task attempt's events from the node that holds
// it, in the session with Epoch.
type IngestItem struct {
	NodeID  string
	Epoch   int64
	TaskID  string
	Attempt int32
	Events  []*podiumv1.TaskEvent
}

// IngestOutcome is what became of one IngestItem. Err is ErrStaleEpoch when
// the node's session has moved on, ErrNotFound when the node is gone, and
// ErrNotHeld when the node does not hold the attempt; nothing of that item
// was stored then.
type IngestOutcome struct {
	Result IngestResult
	Err    error
}

// IngestEvents stores one task attempt's events; see IngestBatch.
func (s *Store) IngestEvents(ctx context.Context, nodeID string, epoch int64, taskID string, attempt int32,
	events []*podiumv1.TaskEvent) (IngestResult, error) {
	out, err := s.IngestBatch(ctx, []IngestItem{{NodeID: nodeID, Epoch: epoch, TaskID: taskID, Attempt: attempt, Events: events}})
	if err != nil {
		return IngestResult{}, err
	}
	return out[0].Result, out[0].Err
}

// IngestBatch stores the events of many task attempts, from many nodes, in
// one transaction of a handful of set-based statements, so the cost of a
// commit is shared by every session whose events arrived while the previous
// batch was being written.
//
// It is idempotent on (task, attempt, seq): only the events right after an
// attempt's stored high-water mark are taken, in order, so a batch re-sent
// after a reconnect stores nothing twice. A node sends an attempt's events in
// order from the first one it was not told are stored, so a batch that starts
// past the mark means the database lost commits it had acknowledged (a
// failover to a standby that had not received them): those events are gone
// on both sides, and the batch is taken from its start with a note in the
// task's log saying how many were lost (chooseNew). A gap inside a batch
// stops the ingest at the gap. Status changes go through the transition rule
// (transitionTasks) in the same transaction, so the log and the task's state
// never disagree; a task with several status changes in one batch moves
// through them in order.
//
// Each node's row is read FOR KEY SHARE against its session epoch, and a new
// session locks the row FOR UPDATE to bump it (StartSession): the new session
// waits for this write to commit, and a replica that has lost the node writes
// nothing for it. Ordinary updates of node rows (heartbeats, dispatch) do not
// conflict with that lock. Rows are locked in key order, and a deadlock with
// some other multi-row writer is retried.
//
// A failure of the transaction itself is returned as the error, and nothing of
// the batch was stored; items refused one by one say so in their outcome.
func (s *Store) IngestBatch(ctx context.Context, items []IngestItem) ([]IngestOutcome, error) {
	for try := 1; ; try++ {
		out, err := s.ingestBatch(ctx, items)
		var pgErr *pgconn.PgError
		if err != nil && try < 3 && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			continue // deadlock or serialization failure: nothing was written; again
		}
		return out, err
	}
}

// ingestBatch is one try of IngestBatch, in phases inside one
// transaction: lock the rows the batch touches (lockForIngest), choose the
// events that are new from what was locked (chooseNew, pure), move the tasks
// their status changes ask for (moveTasks), and write the log rows and the
// attempts' high-water marks (writeRows). Keeping the choice apart from the
// statements is what lets the idempotency and ordering rules be tested
// without a database.
func (s *Store) ingestBatch(ctx context.Context, items []IngestItem) ([]IngestOutcome, error) {
	for _, it := range items {
		sort.Slice(it.Events, func(i, j int) bool { return it.Events[i].GetSeq() < it.Events[j].GetSeq() })
	}
	keys := ingestKeysOf(items)
	var plan *ingestPlan
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		locked, err := lockForIngest(ctx, tx, keys)
		if err != nil {
			return err
		}
		plan = chooseNew(items, locked)
		if len(plan.taken) == 0 {
			return nil
		}
		if err := moveTasks(ctx, tx, keys.taskIDs, plan); err != nil {
			return err
		}
		return writeRows(ctx, tx, items, plan)
	})
	if err != nil {
		return nil, err
	}
	return plan.out, nil
}

// ingestKeys are the rows a batch locks. The node and task ids are sorted and
// distinct, so every writer locks them in the same order.
type ingestKeys struct {
	nodeIDs, taskIDs []string
	// attTasks and attNums name each item's attempt, one pair per item.
	attTasks []string
	attNums  []int32
	// failing are the tasks the batch reports failed: only theirs is a
	// retry policy worth reading (lockForIngest).
	failing []string
}

func ingestKeysOf(items []IngestItem) ingestKeys {
	var k ingestKeys
	for _, it := range items {
		k.nodeIDs = append(k.nodeIDs, it.NodeID)
		k.taskIDs = append(k.taskIDs, it.TaskID)
		k.attTasks, k.attNums = append(k.attTasks, it.TaskID), append(k.attNums, it.Attempt)
		if slices.ContainsFunc(it.Events, func(ev *podiumv1.TaskEvent) bool {
			return ev.GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_FAILED
		}) {
			k.failing = append(k.failing, it.TaskID)
		}
	}
	slices.Sort(k.nodeIDs)
	k.nodeIDs = slices.Compact(k.nodeIDs)
	slices.Sort(k.taskIDs)
	k.taskIDs = slices.Compact(k.taskIDs)
	return k
}

// moveTasks reserves each task's log positions and makes its status changes,
// round by round (a task's second change in this batch in the second round),
// in one round trip: each statement sees the ones before it. What the rows
// say back is folded into the plan: where each task's new events start, and
// which changes were made.
func moveTasks(ctx context.Context, tx pgx.Tx, taskIDs []string, p *ingestPlan) error {
	b := &pgx.Batch{}
	seqIDs, seqNs := p.seqReservations(taskIDs)
	// This update is also what locks the batch's tasks (the ids are sorted; a
	// deadlock with another multi-row writer is retried); it returns each
	// one's state before the changes below. Like nextSeqs it puts an archived
	// log back in the archive job's queue, HOT-safely (null over null).
	b.Queue(`update podium.tasks t set last_seq = t.last_seq + u.n, log_archived_at = null
		from unnest($1::text[], $2::int[]) as u(id, n) where t.id = u.id
		returning t.id, t.last_seq, t.state`, seqIDs, seqNs)
	rounds := p.statusRounds(taskIDs)
	for _, round := range rounds {
		args, err := transitionArgs(p.roundTransitions(round))
		if err != nil {
			return err
		}
		b.Queue(transitionSQL, args...)
	}
	br := tx.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return fmt.Errorf("reserve log positions: %w", err)
	}
	var id, state string
	var last int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &last, &state}, func() error {
		p.reserved(id, last, state)
		return nil
	}); err != nil {
		br.Close()
		return fmt.Errorf("reserve log positions: %w", err)
	}
	for _, round := range rounds {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return fmt.Errorf("move tasks: %w", err)
		}
		movedIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			br.Close()
			return fmt.Errorf("move tasks: %w", err)
		}
		moved := make(map[string]bool, len(movedIDs))
		for _, id := range movedIDs {
			moved[id] = true
		}
		p.applyRound(round, moved)
	}
	return br.Close()
}

// copyEventsMinBytes is the log output from which a batch's events go in
// by COPY rather than by an insert from unnest. Building and encoding the
// insert's thirteen arrays cost the coordinator about twice the CPU per MiB
// of output that COPY's rows do (11 against 5 ms in the ingest benchmark),
// and Postgres no less; but COPY is a round trip of its own, which a batch
// of status changes and a few lines of output would pay for nothing. Above
// this the bytes dominate.
const copyEventsMinBytes = 256 << 10

// writeRows stores the batch's log rows and the attempts' high-water marks
// (and the end of each attempt that finished): in one round trip, or two when
// the batch carries enough output to go by COPY (copyEventsMinBytes).
func writeRows(ctx context.Context, tx pgx.Tx, items []IngestItem, p *ingestPlan) error {
	ev := newEventColumns(len(p.taken))
	for _, te := range p.taken {
		it := items[te.item]
		ev.add(it.TaskID, it.Attempt, p.tasks[it.TaskID].first+te.pos, te)
	}
	aTasks, aNums, aAcked, aFinished, aOut := p.attemptColumns()
	b := &pgx.Batch{}
	uTasks, uNums, uCPU, uPeak, uWall := p.usageColumns()
	if len(uTasks) > 0 {
		// First in the batch, so its rows are read before the rest is
		// closed. A wall time longer than the attempt has existed (since
		// its assignment, by the database's clock) is cut to that; the
		// outcome says so, for the replica's log.
		b.Queue(`update podium.attempts a set cpu_seconds = u.cpu, peak_memory_bytes = u.peak,
				wall_seconds = case when u.wall is not null
					then least(u.wall, greatest(extract(epoch from now() - a.assigned_at)::float8, 0)) end
			from unnest($1::text[], $2::int[], $3::float8[], $4::bigint[], $5::float8[]) as u(task_id, attempt, cpu, peak, wall)
			where a.task_id = u.task_id and a.attempt = u.attempt
			returning a.task_id, a.attempt, u.wall, a.wall_seconds`, uTasks, uNums, uCPU, uPeak, uWall)
	}
	if ev.bytes >= copyEventsMinBytes {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"podium", "task_events"}, eventColumnNames, ev); err != nil {
			return fmt.Errorf("copy the batch's events: %w", err)
		}
	} else {
		b.Queue(`insert into podium.task_events
			(task_id, seq, attempt, node_seq, at, kind, log_offset, data, state, reason, exit_code, signal, text)
		select * from unnest($1::text[], $2::bigint[], $3::int[], $4::bigint[], $5::timestamptz[], $6::text[],
			$7::bigint[], $8::bytea[], $9::text[], $10::text[], $11::int[], $12::int[], $13::text[])`, ev.args()...)
	}
	b.Queue(`update podium.attempts a set acked_seq = greatest(a.acked_seq, u.acked),
			finished_at = case when u.finished then now() else a.finished_at end,
			output_bytes = a.output_bytes + u.out
		from unnest($1::text[], $2::int[], $3::bigint[], $4::bool[], $5::bigint[]) as u(task_id, attempt, acked, finished, out)
		where a.task_id = u.task_id and a.attempt = u.attempt`, aTasks, aNums, aAcked, aFinished, aOut)
	if tasks, nodes := givenBack(items, p); len(tasks) > 0 {
		// A node that gave an assignment back never ran it: the next
		// placement offers the same attempt again (see nextAttempt). And the
		// node said it has no free slot: whatever it runs beyond what the
		// control plane holds there is busy until its heartbeats say
		// otherwise, so the scheduler does not hand it the task straight
		// back.
		b.Queue("update podium.tasks set attempt_given_back = true where id = any($1)", tasks)
		// Nor did its container ever hold the secrets it was sent: the
		// attempt offered again pins the versions current then, not a
		// value rotated out while it waited.
		b.Queue(`delete from podium.secret_pins p using podium.tasks t
			where t.id = any($1) and p.task_id = t.id and p.attempt = t.attempt`, tasks)
		b.Queue(`update podium.nodes n set busy_slots = greatest(n.busy_slots,
				(case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end)
				- (select count(*) from podium.tasks t where t.node_id = n.id
				   and t.state in ('scheduled', 'provisioning', 'running'))::int)
			where n.id = any($1)`, nodes)
	}
	br := tx.SendBatch(ctx, b)
	if len(uTasks) > 0 {
		if err := readUsageCuts(br, items, p); err != nil {
			br.Close()
			return fmt.Errorf("store the attempts' usage: %w", err)
		}
	}
	return br.Close()
}

// readUsageCuts reads what storing the attempts' usage returned and notes, in
// the outcome of the item that ended each attempt, a wall time that was cut.
func readUsageCuts(br pgx.BatchResults, items []IngestItem, p *ingestPlan) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var a attemptID
	var asked, stored *float64
	_, err = pgx.ForEachRow(rows, []any{&a.task, &a.attempt, &asked, &stored}, func() error {
		if asked == nil || stored == nil || *stored >= *asked {
			return nil
		}
		for i, it := range items {
			if it.TaskID == a.task && it.Attempt == a.attempt && p.out[i].Err == nil {
				p.out[i].Result.UsageCut = fmt.Sprintf("wall time %.3f s is longer than the attempt has existed; stored %.3f s", *asked, *stored)
				break
			}
		}
		return nil
	})
	return err
}

// givenBack are the tasks a batch's nodes gave back (a QUEUED status that
// moved the task), and those nodes, sorted.
func givenBack(items []IngestItem, p *ingestPlan) (tasks, nodes []string) {
	for i, o := range p.out {
		if o.Err == nil && o.Result.Requeued {
			tasks, nodes = append(tasks, items[i].TaskID), append(nodes, items[i].NodeID)
		}
	}
	slices.Sort(nodes)
	return tasks, slices.Compact(nodes)
}

type lockedAttempt struct {
	node  string
	acked int64
}

type attemptID struct {
	task    string
	attempt int32
}

// lockedRows is what a batch read, under its locks, before choosing anything.
type lockedRows struct {
	// epochs are the batch's nodes' session epochs; a node that is gone has
	// none.
	epochs map[string]int64
	// attempts are the batch's attempts that exist, with the node that holds
	// each and its stored high-water mark.
	attempts map[attemptID]lockedAttempt
	// cancelReasons say why the control plane asked to stop a task, for the
	// tasks it did.
	cancelReasons map[string]string
	// retries are the retry policies of the failing tasks that have one,
	// or retry_on_node_loss.
	retries map[string]*retryRule
}

// lockForIngest reads, in one round trip and locking in key order, the
// epochs of the batch's nodes (FOR KEY SHARE) and its attempts (FOR UPDATE),
// and why the control plane asked to stop any of its tasks and the retry
// policy of any it reports failed that has one. That last read takes no
// lock: a node only reports a task cancelled after it was told to stop it,
// which is after the reason was committed, and a spec never changes. The
// spec is read only for the failing tasks: detoasting every task's spec for
// every batch of log output would cost the ingest path for nothing.
func lockForIngest(ctx context.Context, tx pgx.Tx, k ingestKeys) (lockedRows, error) {
	b := &pgx.Batch{}
	b.Queue("select id, session_epoch from podium.nodes where id = any($1) order by id for key share", k.nodeIDs)
	b.Queue(`select a.task_id, a.attempt, a.node_id, a.acked_seq from podium.attempts a
		join unnest($1::text[], $2::int[]) as u(task_id, attempt) on a.task_id = u.task_id and a.attempt = u.attempt
		order by a.task_id, a.attempt for update of a`, k.attTasks, k.attNums)
	b.Queue(`select id, cancel_reason, case when id = any($2) then spec->'retry' end, max_attempts, retry_on_node_loss from podium.tasks
		where id = any($1) and (cancel_reason is not null or (id = any($2) and (spec ? 'retry' or retry_on_node_loss)))`, k.taskIDs, k.failing)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	l := lockedRows{epochs: map[string]int64{}, attempts: map[attemptID]lockedAttempt{}, cancelReasons: map[string]string{},
		retries: map[string]*retryRule{}}
	rows, err := br.Query()
	if err != nil {
		return l, err
	}
	var id string
	var epoch int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &epoch}, func() error { l.epochs[id] = epoch; return nil }); err != nil {
		return l, err
	}
	rows, err = br.Query()
	if err != nil {
		return l, err
	}
	var a attemptID
	var la lockedAttempt
	if _, err := pgx.ForEachRow(rows, []any{&a.task, &a.attempt, &la.node, &la.acked}, func() error {
		l.attempts[a] = la
		return nil
	}); err != nil {
		return l, err
	}
	rows, err = br.Query()
	if err != nil {
		return l, err
	}
	var reason *string
	var retry []byte
	var maxAttempts int32
	var onNodeLoss bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &reason, &retry, &maxAttempts, &onNodeLoss}, func() error {
		if reason != nil {
			l.cancelReasons[id] = *reason
		}
		if len(retry) > 0 {
			p := &podiumv1.RetryPolicy{}
			// A policy that no longer parses (it cannot: the spec was
			// stored by this program's encoder) retries nothing.
			if err := protojson.Unmarshal(retry, p); err == nil {
				l.retries[id] = &retryRule{policy: p, maxAttempts: maxAttempts}
			}
		}
		if onNodeLoss {
			if l.retries[id] == nil {
				l.retries[id] = &retryRule{maxAttempts: maxAttempts}
			}
			l.retries[id].onNodeLoss = true
		}
		return nil
	}); err != nil {
		return l, err
	}
	return l, br.Close()
}

// eventColumnNames are the columns of task_events an ingest writes, in the
// order of eventColumns.args.
var eventColumnNames = []string{"task_id", "seq", "attempt", "node_seq", "at", "kind", "log_offset", "data",
	"state", "reason", "exit_code", "signal", "text"}

// eventColumns are task_events rows as one array per column, for an insert
// from unnest; they are also a pgx.CopyFromSource of the same rows, for COPY.
type eventColumns struct {
	taskIDs                []string
	seqs, nodeSeqs         []int64
	attempts               []int32
	ats                    []time.Time
	kinds                  []string
	offsets                []*int64
	data                   [][]byte
	states, reasons, texts []*string
	exits, signals         []*int32
	// bytes is the log output of the rows.
	bytes int
	// next is the row Next moves to, as a CopyFromSource.
	next int
}

func newEventColumns(n int) *eventColumns {
	return &eventColumns{
		taskIDs: make([]string, 0, n), seqs: make([]int64, 0, n), nodeSeqs: make([]int64, 0, n),
		attempts: make([]int32, 0, n), ats: make([]time.Time, 0, n), kinds: make([]string, 0, n),
		offsets: make([]*int64, 0, n), data: make([][]byte, 0, n), states: make([]*string, 0, n),
		reasons: make([]*string, 0, n), texts: make([]*string, 0, n), exits: make([]*int32, 0, n),
		signals: make([]*int32, 0, n),
	}
}

func (c *eventColumns) add(taskID string, attempt int32, seq int64, te takenEvent) {
	at := time.Now()
	if te.ev.GetTime() != nil {
		at = te.ev.GetTime().AsTime()
	}
	var (
		kind                string
		offset              *int64
		data                []byte
		state, reason, text *string
		exit, signal        *int32
	)
	switch b := te.ev.GetBody().(type) {
	case *podiumv1.TaskEvent_Log:
		kind = "stdout"
		if b.Log.GetStream() == podiumv1.LogStream_LOG_STREAM_STDERR {
			kind = "stderr"
		}
		off := int64(b.Log.GetOffset())
		offset, data = &off, b.Log.GetData()
		if data == nil {
			data = []byte{}
		}
	case *podiumv1.TaskEvent_Status:
		if te.tr == nil {
			kind, text = "note", &te.note
			break
		}
		sig := te.tr.Signal
		kind, state, reason, exit, signal = "status", &te.tr.To, te.tr.Reason, te.tr.ExitCode, &sig
	case *podiumv1.TaskEvent_Note:
		t := b.Note.GetText()
		kind, text = "note", &t
	default:
		t := fmt.Sprintf("ignored event %d from the node: it has no body", te.ev.GetSeq())
		kind, text = "note", &t
	}
	c.taskIDs, c.seqs, c.attempts = append(c.taskIDs, taskID), append(c.seqs, seq), append(c.attempts, attempt)
	c.nodeSeqs, c.ats, c.kinds = append(c.nodeSeqs, int64(te.ev.GetSeq())), append(c.ats, at), append(c.kinds, kind)
	c.offsets, c.data = append(c.offsets, offset), append(c.data, data)
	c.states, c.reasons, c.texts = append(c.states, state), append(c.reasons, reason), append(c.texts, text)
	c.exits, c.signals = append(c.exits, exit), append(c.signals, signal)
	c.bytes += len(data)
}

// Next, Values and Err make the rows a pgx.CopyFromSource.
func (c *eventColumns) Next() bool {
	c.next++
	return c.next <= len(c.taskIDs)
}

func (c *eventColumns) Values() ([]any, error) {
	i := c.next - 1
	return []any{c.taskIDs[i], c.seqs[i], c.attempts[i], c.nodeSeqs[i], c.ats[i], c.kinds[i], c.offsets[i], c.data[i],
		c.states[i], c.reasons[i], c.exits[i], c.signals[i], c.texts[i]}, nil
}

func (c *eventColumns) Err() error { return nil }

func (c *eventColumns) args() []any {
	return []any{c.taskIDs, c.seqs, c.attempts, c.nodeSeqs, c.ats, c.kinds, c.offsets, c.data,
		c.states, c.reasons, c.exits, c.signals, c.texts}
}

// AckedSeq returns the stored high-water mark of an attempt held by a node, and
// false when the node does not hold that attempt (any more).
func (s *Store) AckedSeq(ctx context.Context, nodeID, taskID string, attempt int32) (uint64, bool, error) {
	var acked int64
	var state string
	err := s.pool.QueryRow(ctx, `select a.acked_seq, t.state from podium.attempts a
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
