package store

import (
	"errors"
	"slices"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// These tests need no Postgres: they give chooseNew and the plan's helpers
// the rows a batch would have locked, and check what it would write.

func logAt(seq uint64, data string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: []byte(data)}}}
}

func statusAt(seq uint64, s podiumv1.TaskState) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s, Reason: "node says"}}}
}

// lockedFor is what the batch's lock would read: node_a in session 7 and
// node_b in session 3, holding task_1 (acked up to 2) and task_2 (nothing
// acked yet) respectively.
func lockedFor() lockedRows {
	return lockedRows{
		epochs: map[string]int64{"node_a": 7, "node_b": 3},
		attempts: map[attemptID]lockedAttempt{
			{"task_1", 1}: {node: "node_a", acked: 2},
			{"task_2", 1}: {node: "node_b", acked: 0},
		},
		cancelReasons: map[string]string{},
	}
}

func takenSeqs(p *ingestPlan, item int) []uint64 {
	var seqs []uint64
	for _, te := range p.taken {
		if te.item == item {
			seqs = append(seqs, te.ev.GetSeq())
		}
	}
	return seqs
}

func TestChooseNewTakesOnlyWhatFollowsTheHighWaterMark(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		events []*podiumv1.TaskEvent
		want   []uint64 // seqs taken
		acked  uint64
		bytes  int
	}{
		{"the next events, in order", []*podiumv1.TaskEvent{logAt(3, "ab"), logAt(4, "cde")}, []uint64{3, 4}, 4, 5},
		{"events already stored are skipped", []*podiumv1.TaskEvent{logAt(1, "x"), logAt(2, "y"), logAt(3, "z")}, []uint64{3}, 3, 1},
		{"a batch sent again stores nothing", []*podiumv1.TaskEvent{logAt(1, "x"), logAt(2, "y")}, nil, 2, 0},
		{"a gap inside a batch stops the ingest at the gap", []*podiumv1.TaskEvent{logAt(3, "a"), logAt(5, "c"), logAt(6, "d")}, []uint64{3}, 3, 1},
		{"no events at all", nil, nil, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			items := []IngestItem{{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: c.events}}
			p := chooseNew(items, lockedFor())
			res := p.out[0]
			if res.Err != nil {
				t.Fatalf("refused: %v", res.Err)
			}
			if got := takenSeqs(p, 0); !slices.Equal(got, c.want) {
				t.Errorf("took seqs %v, want %v", got, c.want)
			}
			if res.Result.Acked != c.acked || res.Result.Stored != len(c.want) || res.Result.Bytes != c.bytes {
				t.Errorf("result %+v, want acked %d, stored %d, %d bytes", res.Result, c.acked, len(c.want), c.bytes)
			}
			a := p.atts[attemptID{"task_1", 1}]
			if a.acked != int64(c.acked) || a.touched != (len(c.want) > 0) {
				t.Errorf("attempt row %+v, want acked %d, touched only if it moved", *a, c.acked)
			}
		})
	}
}

// A batch that starts past the mark is from a node that no longer has the
// events in between: it was told they were stored, and the database lost
// them (a failover to a standby that had not received them). The batch is
// taken from its start after a note counting the lost events, placed after
// a hole as long as them, so the task ends instead of waiting forever.
func TestChooseNewGoesOnPastEventsTheNodeNoLongerHas(t *testing.T) {
	t.Parallel()
	items := []IngestItem{{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1,
		Events: []*podiumv1.TaskEvent{logAt(5, "e"), logAt(6, "f"), logAt(8, "h")}}}
	p := chooseNew(items, lockedFor()) // task_1 is acked up to 2
	res := p.out[0]
	if res.Err != nil || res.Result.Lost != 2 || res.Result.Stored != 2 || res.Result.Acked != 6 || res.Result.Bytes != 2 {
		t.Fatalf("result %+v (err %v), want 2 lost (3 and 4), 2 stored (5 and 6, not 8 past the gap inside), acked 6, 2 bytes", res.Result, res.Err)
	}
	if len(p.taken) != 3 {
		t.Fatalf("took %d events, want the note, 5 and 6", len(p.taken))
	}
	note := p.taken[0]
	text := note.ev.GetNote().GetText()
	if !strings.HasPrefix(text, "2 events of attempt 1 (node seqs 3-4") || !strings.Contains(text, "database lost those commits") {
		t.Errorf("the note says %q; want the count, the attempt, the seqs and why", text)
	}
	var pos []int64
	for _, te := range p.taken {
		pos = append(pos, te.pos)
	}
	if !slices.Equal(pos, []int64{2, 3, 4}) || p.tasks["task_1"].count != 5 {
		t.Errorf("positions %v (count %d), want the note at 2 after a hole of 2, then 3 and 4 (count 5)", pos, p.tasks["task_1"].count)
	}
	if a := p.atts[attemptID{"task_1", 1}]; a.acked != 6 || !a.touched {
		t.Errorf("attempt row %+v, want acked 6", *a)
	}
	// The same batch again: nothing new, nothing lost.
	p = chooseNew(items, lockedRows{epochs: map[string]int64{"node_a": 7},
		attempts: map[attemptID]lockedAttempt{{"task_1", 1}: {node: "node_a", acked: 6}}})
	if r := p.out[0].Result; r.Lost != 0 || r.Stored != 0 || len(p.taken) != 0 {
		t.Errorf("sent again it gave %+v and took %d events, want nothing", r, len(p.taken))
	}
}

func TestChooseNewRefusesItemsWholeWithTheReason(t *testing.T) {
	t.Parallel()
	ev := []*podiumv1.TaskEvent{logAt(3, "x")}
	items := []IngestItem{
		{NodeID: "node_gone", Epoch: 1, TaskID: "task_1", Attempt: 1, Events: ev},
		{NodeID: "node_a", Epoch: 6, TaskID: "task_1", Attempt: 1, Events: ev}, // an older session
		{NodeID: "node_b", Epoch: 3, TaskID: "task_1", Attempt: 1, Events: ev}, // node_a holds it
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 2, Events: ev}, // no such attempt
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: ev},
	}
	p := chooseNew(items, lockedFor())
	want := []error{ErrNotFound, ErrStaleEpoch, ErrNotHeld, ErrNotHeld, nil}
	for i, w := range want {
		if !errors.Is(p.out[i].Err, w) {
			t.Errorf("item %d: %v, want %v", i, p.out[i].Err, w)
		}
		if w != nil && (p.out[i].Result != IngestResult{} || len(takenSeqs(p, i)) != 0) {
			t.Errorf("item %d was refused but took %v (%+v)", i, takenSeqs(p, i), p.out[i].Result)
		}
	}
	if got := takenSeqs(p, 4); !slices.Equal(got, []uint64{3}) {
		t.Errorf("the good item took %v, want [3]", got)
	}
}

// Two items for one attempt in one batch (two messages of a node's stream
// that arrived while the last batch was written) continue from each other:
// the second skips what the first took, and the task's positions run on.
func TestChooseNewContinuesAnAttemptAcrossItems(t *testing.T) {
	t.Parallel()
	items := []IngestItem{
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: []*podiumv1.TaskEvent{logAt(3, "a"), logAt(4, "b")}},
		{NodeID: "node_b", Epoch: 3, TaskID: "task_2", Attempt: 1, Events: []*podiumv1.TaskEvent{logAt(1, "z")}},
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: []*podiumv1.TaskEvent{logAt(4, "b"), logAt(5, "c")}},
	}
	p := chooseNew(items, lockedFor())
	if got := takenSeqs(p, 2); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("the second item took %v, want [5]", got)
	}
	if p.out[2].Result.Acked != 5 || p.out[0].Result.Acked != 4 {
		t.Errorf("acked %d then %d, want 4 then 5", p.out[0].Result.Acked, p.out[2].Result.Acked)
	}
	var pos []int64
	for _, te := range p.taken {
		if items[te.item].TaskID == "task_1" {
			pos = append(pos, te.pos)
		}
	}
	if !slices.Equal(pos, []int64{0, 1, 2}) || p.tasks["task_1"].count != 3 || p.tasks["task_2"].count != 1 {
		t.Errorf("task_1 positions %v (count %d), task_2 count %d; want 0 1 2 (3) and 1", pos, p.tasks["task_1"].count, p.tasks["task_2"].count)
	}
	ids, counts := p.seqReservations([]string{"task_1", "task_2", "task_3"})
	if !slices.Equal(ids, []string{"task_1", "task_2"}) || !slices.Equal(counts, []int32{3, 1}) {
		t.Errorf("reserves %v %v, want task_1 3 and task_2 1", ids, counts)
	}
	// Reserving returns the log's new end: task_1's new events start right
	// after what it had.
	p.reserved("task_1", 40, Running)
	if p.tasks["task_1"].first != 38 {
		t.Errorf("task_1's first new position is %d, want 38", p.tasks["task_1"].first)
	}
}

// Status changes become transitions from the states the lifecycle allows,
// grouped so a task's second change in a batch runs after its first; one a
// node may not report is a note; a "cancelled" for a task stopped for its
// timeout is a failure.
func TestChooseNewStatusChanges(t *testing.T) {
	t.Parallel()
	locked := lockedFor()
	locked.cancelReasons["task_2"] = "timeout"
	items := []IngestItem{
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: []*podiumv1.TaskEvent{
			statusAt(3, podiumv1.TaskState_TASK_STATE_RUNNING),
			logAt(4, "hi"),
			statusAt(5, podiumv1.TaskState_TASK_STATE_LOST), // only the control plane loses a task
			statusAt(6, podiumv1.TaskState_TASK_STATE_SUCCEEDED),
		}},
		{NodeID: "node_b", Epoch: 3, TaskID: "task_2", Attempt: 1, Events: []*podiumv1.TaskEvent{
			statusAt(1, podiumv1.TaskState_TASK_STATE_CANCELLED),
		}},
	}
	p := chooseNew(items, locked)
	if len(p.taken) != 5 {
		t.Fatalf("took %d events, want all 5", len(p.taken))
	}
	if te := p.taken[2]; te.tr != nil || te.note != `ignored a status "lost" the node may not report` {
		t.Errorf("a reported lost became %+v / %q, want the note", te.tr, te.note)
	}
	rounds := p.statusRounds([]string{"task_1", "task_2"})
	if len(rounds) != 2 || !slices.Equal(rounds[0], []int{0, 4}) || !slices.Equal(rounds[1], []int{3}) {
		t.Fatalf("rounds %v, want [[0 4] [3]]: each task's first change together, task_1's second after", rounds)
	}
	first := p.roundTransitions(rounds[0])
	if tr := first[0]; tr.TaskID != "task_1" || tr.To != Running || !slices.Equal(tr.From, []string{Scheduled, Provisioning}) || tr.Attempt != 1 {
		t.Errorf("running became %+v", tr)
	}
	if tr := first[1]; tr.To != Failed || *tr.Reason != "timeout" || !slices.Equal(tr.From, Active) {
		t.Errorf("a cancelled after a timeout became %+v (reason %q), want failed from any active state with reason timeout", tr, *tr.Reason)
	}
	if tr := p.roundTransitions(rounds[1])[0]; tr.To != Succeeded || !slices.Equal(tr.From, Active) {
		t.Errorf("succeeded became %+v", tr)
	}
}

// What the database says back decides the rest: a change that was made ends
// the attempt when the task ended or was given back; one that was not (the
// task had moved past it) is stored as a note saying so.
func TestApplyRound(t *testing.T) {
	t.Parallel()
	items := []IngestItem{
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: []*podiumv1.TaskEvent{
			statusAt(3, podiumv1.TaskState_TASK_STATE_FAILED)}},
		{NodeID: "node_b", Epoch: 3, TaskID: "task_2", Attempt: 1, Events: []*podiumv1.TaskEvent{
			statusAt(1, podiumv1.TaskState_TASK_STATE_QUEUED)}},
	}
	p := chooseNew(items, lockedFor())
	p.reserved("task_1", 10, Cancelled)
	p.reserved("task_2", 1, Scheduled)
	round := p.statusRounds([]string{"task_1", "task_2"})[0]
	p.applyRound(round, map[string]bool{"task_2": true})

	if te := p.taken[0]; te.tr != nil || te.note != `ignored a late "failed" from the node: the task is already cancelled` {
		t.Errorf("a change not made became %+v / %q, want the note", te.tr, te.note)
	}
	if r := p.out[0].Result; r.Terminal != "" || p.atts[attemptID{"task_1", 1}].finished {
		t.Errorf("a change not made ended the attempt: %+v", r)
	}
	if r := p.out[1].Result; !r.Requeued || r.Terminal != "" || p.tasks["task_2"].state != Queued {
		t.Errorf("a node giving back its task: %+v, task %s; want requeued", r, p.tasks["task_2"].state)
	}
	// Both attempts' marks moved; the order of the rows does not matter.
	tasks, attempts, acked, finished, _ := p.attemptColumns()
	if sorted := slices.Sorted(slices.Values(tasks)); !slices.Equal(sorted, []string{"task_1", "task_2"}) {
		t.Fatalf("attempt rows written for %v, want task_1 and task_2", tasks)
	}
	for i, id := range tasks {
		if id == "task_2" && (attempts[i] != 1 || acked[i] != 1 || !finished[i]) {
			t.Errorf("task_2's attempt row: attempt %d, acked %d, finished %v; want 1, 1, true", attempts[i], acked[i], finished[i])
		}
		if id == "task_1" && (acked[i] != 3 || finished[i]) {
			t.Errorf("task_1's attempt row: acked %d, finished %v; want 3, not finished", acked[i], finished[i])
		}
	}
}
