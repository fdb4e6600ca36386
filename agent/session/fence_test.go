package session_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// fencingStream answers the node's first Hello with fencing thresholds
// (unreachable after 500 ms, offline after 1.5 s) and assigns it "requeued",
// a task the control plane would requeue on node loss, so fencing stops it.
func fencingStream(t *testing.T, f *fixture) *conn {
	t.Helper()
	cn := f.coord.next(t)
	cn.hello(t)
	ack := helloAck()
	ack.GetHelloAck().UnreachableAfterMs, ack.GetHelloAck().OfflineAfterMs = 500, 1500
	cn.push(ack)
	cn.push(assignSpec("requeued", &podiumv1.TaskSpec{Image: "img", RetryOnNodeLoss: true, MaxAttempts: 2}))
	return cn
}

var heartbeatAck = &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HeartbeatAck{HeartbeatAck: &podiumv1.HeartbeatAck{}}}

func assignSpec(task string, spec *podiumv1.TaskSpec) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: &podiumv1.Assign{TaskId: task, Attempt: 1, Spec: spec}}}
}

// A node that reaches no replica for as long as the control plane takes to
// declare it offline fences itself: it stops the attempt the control plane
// will have requeued elsewhere (retry_on_node_loss, an attempt left), saying
// why in the task's notes and its own log, keeps the other running for
// adoption (with a note too), ends the stream it fenced on, and leaves the
// stopped attempt out of its next Hello so a coordinator that still holds it
// applies its node-loss policy; the stopped attempt's note and status go
// out only after that Hello is answered.
// While the control plane answers its heartbeats, however long, nothing is
// stopped.
func TestFencesRequeuableTasksPastTheOfflineThreshold(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := fencingStream(t, f)
	cn.push(assignSpec("kept", &podiumv1.TaskSpec{Image: "img"}))
	cn.events(t, 2)

	// Healthy: every heartbeat is answered, for twice the offline threshold
	// (heartbeats every 100 ms).
	for answered := 0; answered < 30; {
		if cn.read(t).GetHeartbeat() != nil {
			cn.push(heartbeatAck)
			answered++
		}
	}
	select {
	case c := <-r.cancels:
		t.Fatalf("a node whose heartbeats are answered stopped a task: %s", c)
	default:
	}

	// Cut off: nothing answers any more.
	c := wait.Recv(t, patience, "the node to fence the requeued task", r.cancels)
	if !strings.HasPrefix(c, "requeued: fenced: ") {
		t.Fatalf("cancel %q, want the requeued task stopped because the node fenced itself", c)
	}
	// The test runner reports the cancel before it ends the attempt.
	wait.For(t, patience, "one task, the one without retry_on_node_loss, to be left running after fencing", func() bool {
		return r.Running() == 1
	})
	select {
	case c := <-r.cancels:
		t.Fatalf("fencing stopped a task the control plane will not requeue: %s", c)
	default:
	}
	wait.For(t, patience, "the agent's log to say what fencing did with each task", func() bool {
		return strings.Contains(f.logs.String(), "fencing: stopping a task the control plane will requeue") &&
			strings.Contains(f.logs.String(), "fencing: keeping a task running for adoption")
	})
	// The node ends the stream it fenced on: nothing of the stopped attempt
	// goes out on it, where a coordinator that has not given the node up
	// yet would take its final status for a cancel.
	var events []*podiumv1.TaskEvent
	for _, m := range cn.untilClosed(t, "the node to end the stream it fenced on") {
		events = append(events, m.GetEvents().GetEvents()...)
	}
	for _, ev := range events {
		if ev.GetTaskId() == "requeued" && ev.GetSeq() > 1 {
			t.Fatalf("the fenced attempt's event %v went out on the stream open when the node fenced", ev)
		}
	}
	// The next Hello leaves the fenced attempt out, so a coordinator still
	// holding it applies its node-loss policy; after the HelloAck its note
	// and final status are sent.
	cn = f.coord.next(t)
	h := cn.hello(t)
	if len(h.GetRunning()) != 1 || h.GetRunning()[0].GetTaskId() != "kept" {
		t.Fatalf("Hello after fencing reports %v, want only the task kept for adoption", h.GetRunning())
	}
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "kept", Attempt: 1, Keep: true, AckedSeq: 1}))
	var notes []string
	cancelled := false
	deadline := time.Now().Add(patience)
	for !cancelled || len(notes) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after the new HelloAck: notes %q, cancelled status sent: %v; want a note on each task and the stopped one's status", notes, cancelled)
		}
		events = append(events, cn.read(t).GetEvents().GetEvents()...)
		notes, cancelled = nil, false
		for _, ev := range events {
			switch {
			case ev.GetNote() != nil:
				notes = append(notes, ev.GetTaskId()+": "+ev.GetNote().GetText())
			case ev.GetTaskId() == "requeued" && ev.GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_CANCELLED:
				cancelled = true
			}
		}
	}
	joined := strings.Join(notes, "\n")
	if !strings.Contains(joined, "requeued: fenced: this node reached no coordinator replica") ||
		!strings.Contains(joined, "kept: this node reached no coordinator replica") || !strings.Contains(joined, "keeps running") {
		t.Fatalf("the tasks' notes after fencing are\n%s\nwant one on each, saying what became of it", joined)
	}
}

// An attempt a node gave back is offered again under the same number, and
// the assignment says how many of its events the coordinator stored: a node
// that never saw the attempt numbers its events after them, or they would be
// dropped as repeats.
func TestReofferedAttemptNumbersAfterTheStoredEvents(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 1, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	a := assign("t1")
	a.GetAssign().AckedSeq = 3
	cn.push(a)
	ev := cn.events(t, 1)[0]
	if ev.GetSeq() != 4 || ev.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("first event of a re-offered attempt with 3 events stored: %v, want seq 4 PROVISIONING", ev)
	}
}

// teardownRunner is a runner whose cancels last until the test ends them
// (r.status with a terminal state), as a container's teardown does.
type teardownRunner struct {
	*runner
	stopping chan attempt.Key
}

func (r *teardownRunner) Cancel(taskID string, n int32, _ string, _ time.Duration) bool {
	k := attempt.Key{TaskID: taskID, Attempt: n}
	r.mu.Lock()
	_, ok := r.runs[k]
	r.mu.Unlock()
	if ok {
		r.stopping <- k
	}
	return ok
}

// While a node tears down an attempt the coordinator disowned, that slot is
// the node's, not the scheduler's: the coordinator counts it busy until the
// node's heartbeat says otherwise, so the node heartbeats as soon as the
// teardown ends rather than at its next interval.
func TestHeartbeatsWhenADisownedTeardownEnds(t *testing.T) {
	t.Parallel()
	r := &teardownRunner{runner: newRunner(), stopping: make(chan attempt.Key, 4)}
	f := start(t, r, 1, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.end <- errors.New("restart")

	cn = f.coord.next(t)
	cn.hello(t)
	slow := helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: false})
	slow.GetHelloAck().HeartbeatIntervalMs = 3_600_000 // no heartbeat but the ones that are due at once
	cn.push(slow)
	k := wait.Recv(t, patience, "the disowned task's teardown to start", r.stopping)
	cn.heartbeatUntil(t, "a heartbeat counting the slot being torn down", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetRunningTasks() == 1 && hb.GetFreeSlots() == 0
	})
	r.status(k, podiumv1.TaskState_TASK_STATE_CANCELLED, "torn down")
	cn.heartbeatUntil(t, "a heartbeat with the slot free, at once", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetRunningTasks() == 0 && hb.GetFreeSlots() == 1
	})
}

// A fenced attempt is left out of the next Hello's running list, yet until
// its teardown ends it holds a slot: the Hello counts it as stopping, so the
// coordinator assigns nothing into that slot for the node to give back, and
// the node heartbeats the moment the teardown ends rather than at its next
// interval.
func TestHelloCountsAFencedAttemptStillStopping(t *testing.T) {
	t.Parallel()
	r := &teardownRunner{runner: newRunner(), stopping: make(chan attempt.Key, 4)}
	f := start(t, r, 1, nil)
	cn := fencingStream(t, f)
	cn.events(t, 1)

	// Cut off: nothing answers, and the node fences the attempt, whose
	// teardown goes on; it ends the stream it fenced on.
	k := wait.Recv(t, patience, "the node to fence the requeued task", r.stopping)
	cn.untilClosed(t, "the node to end the stream it fenced on")
	cn = f.coord.next(t)
	h := cn.hello(t)
	if len(h.GetRunning()) != 0 || h.GetStopping() != 1 {
		t.Fatalf("Hello while the fenced attempt is still stopping: running %v, stopping %d; want none running and 1 stopping",
			h.GetRunning(), h.GetStopping())
	}
	slow := helloAck()
	slow.GetHelloAck().HeartbeatIntervalMs = 3_600_000 // no heartbeat but the ones that are due at once
	cn.push(slow)
	cn.heartbeatUntil(t, "a heartbeat counting the slot being stopped", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetRunningTasks() == 1 && hb.GetFreeSlots() == 0
	})
	r.status(k, podiumv1.TaskState_TASK_STATE_CANCELLED, "fenced")
	cn.heartbeatUntil(t, "a heartbeat with the slot free, at once", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetRunningTasks() == 0 && hb.GetFreeSlots() == 1
	})
}

// lease is the fence the test runner's attempt was last told (zero: none).
func (r *runner) lease(task string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[attempt.Key{TaskID: task, Attempt: 1}]
}

// The node hands the runner of each attempt fencing would stop a lease that
// runs out when the node itself would fence it — the offline threshold less
// the lead, from the last answer of a replica — and moves it on as replicas
// answer, so that a hung agent's task is fenced by its runner at that
// moment. An attempt the control plane would not run again elsewhere gets
// no lease: it keeps running for adoption, whatever becomes of the agent.
func TestLeasesFollowTheLastAnswer(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := fencingStream(t, f)
	cn.push(assignSpec("kept", &podiumv1.TaskSpec{Image: "img"}))
	cn.events(t, 2)

	wait.For(t, patience, "the requeued task's runner to be given a lease", func() bool { return !r.lease("requeued").IsZero() })
	first := r.lease("requeued")
	if until := time.Until(first); until <= 0 || until > 1500*time.Millisecond {
		t.Fatalf("the first lease runs out in %s; want within the offline threshold of 1.5 s", until)
	}
	// Answered heartbeats move it on: past where the first one ran out.
	for answered := 0; answered < 30 && !r.lease("requeued").After(first.Add(time.Second)); {
		if cn.read(t).GetHeartbeat() != nil {
			cn.push(heartbeatAck)
			answered++
		}
	}
	if moved := r.lease("requeued"); !moved.After(first.Add(time.Second)) {
		t.Fatalf("after 30 answered heartbeats (3 s) the lease runs out at %s, the first at %s; want it moved on with the answers", moved, first)
	}
	if !r.lease("kept").IsZero() {
		t.Fatalf("the task without retry_on_node_loss was given a lease (%s); it must never be fenced", r.lease("kept"))
	}
}
