package store

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The pure half of an ingest: which of a batch's events are new, what their
// status changes ask for, and what becomes of the batch once the tasks have
// moved. Nothing here talks to Postgres, so the rules that make ingest
// idempotent and ordered are tested without one; ingest.go runs the
// statements around them.

// ingestPlan is what a batch writes, worked out from the rows it locked and
// completed as the tasks move.
type ingestPlan struct {
	out   []IngestOutcome
	tasks map[string]*ingestTask
	atts  map[attemptID]*attRow
	// taken are the events the batch stores, in the order they were taken.
	taken []takenEvent
}

// ingestTask is what a batch knows of one task while it is written.
type ingestTask struct {
	state        string
	cancelReason string
	// retry is the task's retry policy, nil if it has none.
	retry *retryRule
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

// attRow is what a batch knows of one attempt while it is written.
type attRow struct {
	node  string
	acked int64
	// finished is set when the attempt ended or was given back.
	finished bool
	// touched is set when the batch moved the high-water mark.
	touched bool
	// outBytes is the output the batch stores for the attempt; usage is
	// what its terminal status, if this batch made it, says it used.
	outBytes int64
	usage    *podiumv1.Usage
}

// chooseNew decides, item by item in arrival order, which events are new:
// only those right after the attempt's stored high-water mark, in order, so a
// batch sent again stores nothing twice and a gap inside a batch stops the
// attempt's ingest at the gap. An item that starts past the mark is from a
// node that no longer has the events in between (it re-sends from the first
// one it was not told are stored, so the database lost what it had
// acknowledged): it is taken from its start, after a note that counts the
// lost events. Two items for the same attempt in one
// batch continue from each other. An item from a node that is gone, from a
// session that is no longer the node's, or for an attempt the node does not
// hold is refused whole, with the error in its outcome. Each item's events
// must be sorted by seq.
func chooseNew(items []IngestItem, locked lockedRows) *ingestPlan {
	p := &ingestPlan{
		out:   make([]IngestOutcome, len(items)),
		tasks: map[string]*ingestTask{},
		atts:  make(map[attemptID]*attRow, len(locked.attempts)),
	}
	for k, a := range locked.attempts {
		p.atts[k] = &attRow{node: a.node, acked: a.acked}
	}
	for i, it := range items {
		epoch, ok := locked.epochs[it.NodeID]
		if !ok {
			p.out[i].Err = ErrNotFound
			continue
		}
		if epoch != it.Epoch {
			p.out[i].Err = ErrStaleEpoch
			continue
		}
		a, ok := p.atts[attemptID{it.TaskID, it.Attempt}]
		if !ok || a.node != it.NodeID {
			p.out[i].Err = ErrNotHeld
			continue
		}
		// The attempt's row exists, so the task's does (it cascades).
		t := p.tasks[it.TaskID]
		if t == nil {
			t = &ingestTask{cancelReason: locked.cancelReasons[it.TaskID], retry: locked.retries[it.TaskID]}
			p.tasks[it.TaskID] = t
		}
		res := &p.out[i].Result
		next := uint64(a.acked) + 1
		if len(it.Events) > 0 && it.Events[0].GetSeq() > next {
			// The node re-sends everything it was not told is stored, from
			// the start, so it no longer has next..first-1: it was told
			// they were stored, by a database that has since lost them.
			// Waiting for them would hang the task forever.
			first := it.Events[0].GetSeq()
			lost := int64(first - next)
			// The note goes after a hole as long as the lost events: a
			// follower that had read them before the failover continues
			// from a position past them, and must not skip what follows.
			t.count += lost
			p.taken = append(p.taken, takenEvent{item: i, ev: lostNote(it.Attempt, next, first-1), pos: t.count})
			t.count++
			res.Lost = int(lost)
			next = first
		}
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
				te.tr, te.note = statusTransition(it.TaskID, it.Attempt, st, t.cancelReason, t.retry)
				if te.tr != nil {
					t.statuses = append(t.statuses, len(p.taken))
				}
			}
			p.taken = append(p.taken, te)
			res.Stored++
			res.Bytes += len(ev.GetLog().GetData())
			a.outBytes += int64(len(ev.GetLog().GetData()))
			next++
		}
		res.Acked = next - 1
		if uint64(a.acked) < next-1 {
			a.acked, a.touched = int64(next-1), true
		}
	}
	return p
}

// lostNote is the task's note for node seqs from..to of an attempt, lost
// with commits the database had acknowledged.
func lostNote(attempt int32, from, to uint64) *podiumv1.TaskEvent {
	text := fmt.Sprintf("%d events of attempt %d (node seqs %d-%d: output, notes or status changes) were lost: "+
		"the control plane had stored them and told the node so, then its database lost those commits "+
		"(a failover to a standby that had not received them, see docs/operations.md); the node no longer had them to send again",
		to-from+1, attempt, from, to)
	return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: text}}}
}

// seqReservations are, for the tasks with new events, in the order of
// taskIDs (sorted, so the update locks them in key order), how many log
// positions each needs.
func (p *ingestPlan) seqReservations(taskIDs []string) (ids []string, counts []int32) {
	for _, id := range taskIDs {
		t := p.tasks[id]
		if t == nil || t.count == 0 {
			continue
		}
		ids, counts = append(ids, id), append(counts, int32(t.count))
	}
	return ids, counts
}

// reserved records what reserving a task's positions returned: its log's new
// end, and its state before this batch's changes.
func (p *ingestPlan) reserved(taskID string, last int64, state string) {
	t := p.tasks[taskID]
	t.first, t.state = last-t.count+1, state
}

// statusRounds groups the status changes into rounds, as indexes into taken:
// the n-th round holds each task's n-th change of this batch. One statement
// moves a row at most once, so a task that went running then succeeded in
// one batch needs two statements, and every task's first change can share
// the first.
func (p *ingestPlan) statusRounds(taskIDs []string) [][]int {
	var rounds [][]int
	for _, id := range taskIDs {
		t := p.tasks[id]
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
	return rounds
}

// roundTransitions are the transitions a round asks for.
func (p *ingestPlan) roundTransitions(round []int) []Transition {
	trs := make([]Transition, len(round))
	for j, idx := range round {
		trs[j] = *p.taken[idx].tr
	}
	return trs
}

// applyRound records which of a round's transitions were made. One that was
// not (a late or replayed status the task has moved past) is stored as a
// note that says so, so the log and the task's state never disagree. One
// that was made says in its item's outcome whether the task ended or was
// given back, and ends the attempt.
func (p *ingestPlan) applyRound(round []int, moved map[string]bool) {
	for _, idx := range round {
		te := &p.taken[idx]
		t := p.tasks[te.tr.TaskID]
		if !moved[te.tr.TaskID] {
			te.note = fmt.Sprintf("ignored a late %q from the node: the task is already %s", te.tr.To, t.state)
			te.tr = nil
			continue
		}
		t.state = te.tr.To
		res := &p.out[te.item].Result
		if Terminal(te.tr.To) {
			res.Terminal = te.tr.To
		}
		switch {
		case te.tr.To == Queued && te.tr.RetryAfter > 0:
			res.Retried = true
		case te.tr.To == Queued:
			res.Requeued = true
		}
		if Terminal(te.tr.To) || te.tr.To == Queued {
			// Only the status that ended the attempt says what it used (a
			// late or replayed one never reaches here), whether it ended the
			// task or sent it back to wait for a retry.
			p.atts[attemptID{te.tr.TaskID, te.tr.Attempt}].finished = true
			p.atts[attemptID{te.tr.TaskID, te.tr.Attempt}].usage = te.ev.GetStatus().GetUsage()
		}
	}
}

// attemptColumns are the attempts whose high-water mark moved or that
// finished, one array per column: outBytes is the output each stores.
func (p *ingestPlan) attemptColumns() (tasks []string, attempts []int32, acked []int64, finished []bool, outBytes []int64) {
	for k, a := range p.atts {
		if a.touched || a.finished {
			tasks, attempts = append(tasks, k.task), append(attempts, k.attempt)
			acked, finished = append(acked, a.acked), append(finished, a.finished)
			outBytes = append(outBytes, a.outBytes)
		}
	}
	return tasks, attempts, acked, finished, outBytes
}

// usageColumns are the attempts that ended in this batch with a usage
// report, one array per column; nil in a column is unknown.
func (p *ingestPlan) usageColumns() (tasks []string, attempts []int32, cpu []*float64, peak []*int64, wall []*float64) {
	for k, a := range p.atts {
		if a.usage == nil {
			continue
		}
		tasks, attempts = append(tasks, k.task), append(attempts, k.attempt)
		cpu, peak, wall = append(cpu, a.usage.CpuSeconds), append(peak, a.usage.PeakMemoryBytes), append(wall, a.usage.WallSeconds)
	}
	return tasks, attempts, cpu, peak, wall
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

// retryRule is a task's retry policy and its budget of attempts.
type retryRule struct {
	policy      *podiumv1.RetryPolicy // nil: none
	maxAttempts int32
	// onNodeLoss is the spec's retry_on_node_loss, which also retries an
	// attempt its node failed (nodeFailure).
	onNodeLoss bool
}

// retryJitter is the wait before a retry: its backoff plus up to a tenth
// more, never less, so that tasks that failed together (a database they all
// use went down) do not all come back in the same second, and the backoff a
// spec gives stays a floor.
func retryJitter(d time.Duration) time.Duration { return d + rand.N(d/10+1) }

// retryTransition is the move that puts a task whose attempt failed back in
// the queue to wait out its backoff, when its retry policy asks for another
// attempt and one is left; nil otherwise. A task the control plane asked to
// stop (a cancel, a timeout) is never retried. Its reason is the line the
// user reads in the log: "attempt 2 of 3 after exit code 1, in 10 s".
func retryTransition(taskID string, attempt int32, st *podiumv1.StatusChange, cancelReason string, r *retryRule) *Transition {
	if r == nil || cancelReason != "" || attempt >= r.maxAttempts {
		return nil
	}
	next := attempt + 1
	var cause string
	var wait time.Duration
	switch {
	case nodeFailure(st):
		if !r.onNodeLoss {
			return nil
		}
		cause, wait = "its node failed it ("+st.GetReason()+")", retryJitter(nodeFailureBackoff)
	case r.policy == nil:
		return nil
	default:
		var ok bool
		if cause, ok = taskspec.RetryCause(r.policy, st.ExitCode, st.GetReason()); !ok {
			return nil
		}
		wait = retryJitter(taskspec.RetryBackoff(r.policy, next))
	}
	reason := fmt.Sprintf("attempt %d of %d after %s, in %s", next, r.maxAttempts, cause, waitText(wait))
	return &Transition{TaskID: taskID, From: Active, To: Queued, Attempt: attempt, Reason: &reason, RetryAfter: wait}
}

// nodeDiskFull starts the reason of an attempt its node stopped, or could
// not prepare, because the node's data disk was full (the agent's
// executor.ReasonNodeDiskFull); nodeEngineDown that of one its node could
// not prepare because its Docker engine could not be reached
// (executor.ReasonEngineDown).
const (
	nodeDiskFull   = "node disk full"
	nodeEngineDown = "node engine down"
)

// nodeFailureBackoff is the wait before the next attempt of one its node
// failed: short, since the next attempt goes to a node that can run it (a
// node below its disk floor, or whose engine does not answer, is placed
// nothing), plus retryJitter's tenth.
const nodeFailureBackoff = time.Second

// nodeFailure says whether a failed attempt failed for its node's trouble,
// not the task's own: the node's disk was full, or its engine could not be
// reached. Such a failure is retried as a lost node is, under
// retry_on_node_loss while attempts remain (retryTransition), whatever the
// task's retry policy says.
func nodeFailure(st *podiumv1.StatusChange) bool {
	return st.ExitCode == nil &&
		(strings.HasPrefix(st.GetReason(), nodeDiskFull) || strings.HasPrefix(st.GetReason(), nodeEngineDown))
}

// waitText says a wait as the retry line does: whole seconds under a
// minute ("10 s"), else Go's form ("2m30s"); rounded down, since the wait is
// at least that.
func waitText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d/time.Second))
	}
	return d.Truncate(time.Second).String()
}

// statusTransition is the transition a node's status change asks for, or the
// note that replaces it when a node may not report that state at all. A
// failure its task's retry policy retries (r) becomes a move back to the
// queue (retryTransition).
func statusTransition(taskID string, attempt int32, st *podiumv1.StatusChange, cancelReason string, r *retryRule) (*Transition, string) {
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
	if to == Failed {
		if tr := retryTransition(taskID, attempt, st, cancelReason, r); tr != nil {
			return tr, ""
		}
	}
	return &Transition{TaskID: taskID, From: from, To: to, Attempt: attempt,
		Reason: &reason, ExitCode: st.ExitCode, Signal: st.GetSignal()}, ""
}
