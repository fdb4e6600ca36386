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
// after a reconnect stores nothing twice and a gap stops the ingest until the
// missing events arrive. Status changes go through the transition rule
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

// ingestTask is what a batch knows of one task while it is written.
type ingestTask struct {
	state        string
	cancelReason string
	// count is how many new events the task has in this batch; the batch's
	// n-th new event of the task gets seq first+n.
	count, first int64
	// statuses are the indexes (into the batch's taken events) of its status
	// changes, in order.
	statuses []int
}

// takenEvent is an event the batch stores, with what it becomes.
type takenEvent struct {
	item int
	ev   *podiumv1.TaskEvent
	// pos is the event's place among its task's new events in this batch.
	pos int64
	// tr is the transition a status change asks for; note replaces the status
	// row when the change may not be made.
	tr   *Transition
	note string
}

func (s *Store) ingestBatch(ctx context.Context, items []IngestItem) ([]IngestOutcome, error) {
	out := make([]IngestOutcome, len(items))
	var nodeIDs, taskIDs, attTasks []string
	var attNums []int32
	for _, it := range items {
		nodeIDs = append(nodeIDs, it.NodeID)
		taskIDs = append(taskIDs, it.TaskID)
		attTasks, attNums = append(attTasks, it.TaskID), append(attNums, it.Attempt)
		sort.Slice(it.Events, func(i, j int) bool { return it.Events[i].GetSeq() < it.Events[j].GetSeq() })
	}
	slices.Sort(nodeIDs)
	nodeIDs = slices.Compact(nodeIDs)
	slices.Sort(taskIDs)
	taskIDs = slices.Compact(taskIDs)

	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i := range out {
			out[i] = IngestOutcome{}
		}
		epochs, acked, cancelReasons, err := lockForIngest(ctx, tx, nodeIDs, attTasks, attNums, taskIDs)
		if err != nil {
			return err
		}
		tasks := map[string]*ingestTask{}

		// Which events are new, item by item in arrival order.
		type attRow struct {
			node  string
			acked int64
			// finished is set when the attempt ended or was given back.
			finished bool
			touched  bool
		}
		atts := map[attemptID]*attRow{}
		for k, a := range acked {
			atts[k] = &attRow{node: a.node, acked: a.acked}
		}
		var taken []takenEvent
		for i, it := range items {
			epoch, ok := epochs[it.NodeID]
			if !ok {
				out[i].Err = ErrNotFound
				continue
			}
			if epoch != it.Epoch {
				out[i].Err = ErrStaleEpoch
				continue
			}
			a, ok := atts[attemptID{it.TaskID, it.Attempt}]
			if !ok || a.node != it.NodeID {
				out[i].Err = ErrNotHeld
				continue
			}
			// The attempt's row exists, so the task's does (it cascades).
			t := tasks[it.TaskID]
			if t == nil {
				t = &ingestTask{cancelReason: cancelReasons[it.TaskID]}
				tasks[it.TaskID] = t
			}
			next := uint64(a.acked) + 1
			for _, ev := range it.Events {
				if ev.GetSeq() < next {
					continue
				}
				if ev.GetSeq() > next {
					break
				}
				te := takenEvent{item: i, ev: ev, pos: t.count}
				t.count++
				if st := ev.GetStatus(); st != nil {
					te.tr, te.note = statusTransition(it.TaskID, it.Attempt, st, t.cancelReason)
					if te.tr != nil {
						t.statuses = append(t.statuses, len(taken))
					}
				}
				taken = append(taken, te)
				out[i].Result.Stored++
				out[i].Result.Bytes += len(ev.GetLog().GetData())
				next++
			}
			out[i].Result.Acked = next - 1
			if uint64(a.acked) < next-1 {
				a.acked, a.touched = int64(next-1), true
			}
		}
		if len(taken) == 0 {
			return nil
		}

		// Reserve each task's log positions and make its status changes, round
		// by round (a task's second change in this batch in the second round),
		// in one round trip: each statement sees the ones before it.
		b := &pgx.Batch{}
		var seqIDs []string
		var seqNs []int32
		for _, id := range taskIDs {
			t := tasks[id]
			if t == nil || t.count == 0 {
				continue
			}
			seqIDs, seqNs = append(seqIDs, id), append(seqNs, int32(t.count))
		}
		// This update is also what locks the batch's tasks (the ids are
		// sorted; a deadlock with another multi-row writer is retried); it
		// returns each one's state before the changes below.
		b.Queue(`update podium.tasks t set last_seq = t.last_seq + u.n
			from unnest($1::text[], $2::int[]) as u(id, n) where t.id = u.id
			returning t.id, t.last_seq, t.state`, seqIDs, seqNs)
		var rounds [][]int // indexes into taken
		for _, id := range taskIDs {
			t := tasks[id]
			if t == nil {
				continue
			}
			for r, idx := range t.statuses {
				if r == len(rounds) {
					rounds = append(rounds, nil)
				}
				rounds[r] = append(rounds[r], idx)
			}
		}
		for _, round := range rounds {
			trs := make([]Transition, len(round))
			for j, idx := range round {
				trs[j] = *taken[idx].tr
			}
			args, err := transitionArgs(trs)
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
			t := tasks[id]
			t.first, t.state = last-t.count+1, state
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
			for _, idx := range round {
				te := &taken[idx]
				t := tasks[te.tr.TaskID]
				if !moved[te.tr.TaskID] {
					te.note = fmt.Sprintf("ignored a late %q from the node: the task is already %s", te.tr.To, t.state)
					te.tr = nil
					continue
				}
				t.state = te.tr.To
				res := &out[te.item].Result
				if Terminal(te.tr.To) {
					res.Terminal = te.tr.To
				}
				if te.tr.To == Queued {
					res.Requeued = true
				}
				if Terminal(te.tr.To) || te.tr.To == Queued {
					atts[attemptID{te.tr.TaskID, te.tr.Attempt}].finished = true
				}
			}
		}
		if err := br.Close(); err != nil {
			return err
		}

		// The log rows and the attempts' high-water marks.
		ev := newEventColumns(len(taken))
		for _, te := range taken {
			it := items[te.item]
			ev.add(it.TaskID, it.Attempt, tasks[it.TaskID].first+te.pos, te)
		}
		var aTasks []string
		var aNums []int32
		var aAcked []int64
		var aFinished []bool
		for k, a := range atts {
			if a.touched || a.finished {
				aTasks, aNums = append(aTasks, k.task), append(aNums, k.attempt)
				aAcked, aFinished = append(aAcked, a.acked), append(aFinished, a.finished)
			}
		}
		b = &pgx.Batch{}
		b.Queue(`insert into podium.task_events
				(task_id, seq, attempt, node_seq, at, kind, log_offset, data, state, reason, exit_code, signal, text)
			select * from unnest($1::text[], $2::bigint[], $3::int[], $4::bigint[], $5::timestamptz[], $6::text[],
				$7::bigint[], $8::bytea[], $9::text[], $10::text[], $11::int[], $12::int[], $13::text[])`, ev.args()...)
		b.Queue(`update podium.attempts a set acked_seq = greatest(a.acked_seq, u.acked),
				finished_at = case when u.finished then now() else a.finished_at end
			from unnest($1::text[], $2::int[], $3::bigint[], $4::bool[]) as u(task_id, attempt, acked, finished)
			where a.task_id = u.task_id and a.attempt = u.attempt`, aTasks, aNums, aAcked, aFinished)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type lockedAttempt struct {
	node  string
	acked int64
}

type attemptID struct {
	task    string
	attempt int32
}

// lockForIngest reads, in one round trip and locking in key order, the
// epochs of the batch's nodes (FOR KEY SHARE) and its attempts (FOR UPDATE),
// and why the control plane asked to stop any of its tasks. That last read
// takes no lock: a node only reports a task cancelled after it was told to
// stop it, which is after the reason was committed.
func lockForIngest(ctx context.Context, tx pgx.Tx, nodeIDs, attTasks []string, attNums []int32, taskIDs []string) (
	map[string]int64, map[attemptID]lockedAttempt, map[string]string, error) {
	b := &pgx.Batch{}
	b.Queue("select id, session_epoch from podium.nodes where id = any($1) order by id for key share", nodeIDs)
	b.Queue(`select a.task_id, a.attempt, a.node_id, a.acked_seq from podium.attempts a
		join unnest($1::text[], $2::int[]) as u(task_id, attempt) on a.task_id = u.task_id and a.attempt = u.attempt
		order by a.task_id, a.attempt for update of a`, attTasks, attNums)
	b.Queue(`select id, cancel_reason from podium.tasks where id = any($1) and cancel_reason is not null`, taskIDs)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	epochs := map[string]int64{}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, nil, err
	}
	var id string
	var epoch int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &epoch}, func() error { epochs[id] = epoch; return nil }); err != nil {
		return nil, nil, nil, err
	}
	acked := map[attemptID]lockedAttempt{}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, nil, err
	}
	var a attemptID
	var la lockedAttempt
	if _, err := pgx.ForEachRow(rows, []any{&a.task, &a.attempt, &la.node, &la.acked}, func() error {
		acked[a] = la
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	reasons := map[string]string{}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, nil, err
	}
	var reason string
	if _, err := pgx.ForEachRow(rows, []any{&id, &reason}, func() error { reasons[id] = reason; return nil }); err != nil {
		return nil, nil, nil, err
	}
	return epochs, acked, reasons, br.Close()
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

// statusTransition is the transition a node's status change asks for, or the
// note that replaces it when a node may not report that state at all.
func statusTransition(taskID string, attempt int32, st *podiumv1.StatusChange, cancelReason string) (*Transition, string) {
	to := StateName(st.GetState())
	from, ok := allowedFrom[to]
	if !ok {
		return nil, fmt.Sprintf("ignored a status %q the node may not report", to)
	}
	reason := st.GetReason()
	// A task the control plane stopped for running past its timeout failed;
	// the node only knows it was told to stop.
	if to == Cancelled && cancelReason == "timeout" {
		to, reason, from = Failed, "timeout", allowedFrom[Failed]
	}
	return &Transition{TaskID: taskID, From: from, To: to, Attempt: attempt,
		Reason: &reason, ExitCode: st.ExitCode, Signal: st.GetSignal()}, ""
}

// eventColumns are task_events rows as one array per column, for an insert
// from unnest.
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
}

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
