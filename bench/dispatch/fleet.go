package main

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

type attemptKey struct {
	task    string
	attempt int32
}

// simTask is one assignment a simulated node holds: the events it has
// produced so far (event i has seq i+1), how many of them went out on the
// current stream and how many the coordinator has acknowledged.
type simTask struct {
	events []*podiumv1.TaskEvent
	sent   int
	acked  uint64
}

// simNode is a node's state that outlives its streams: the tasks it holds and
// a doorbell for its sender.
type simNode struct {
	mu    sync.Mutex
	tasks map[attemptKey]*simTask
	kick  chan struct{} // capacity 1: "there are unsent events"
}

func (n *simNode) ring() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// emit appends the next status event of a task the node still holds.
func (n *simNode) emit(k attemptKey, state podiumv1.TaskState, exit *int32) {
	n.mu.Lock()
	t, ok := n.tasks[k]
	if ok {
		t.events = append(t.events, &podiumv1.TaskEvent{
			TaskId: k.task, Attempt: k.attempt, Seq: uint64(len(t.events) + 1), Time: timestamppb.Now(),
			Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: state, ExitCode: exit}},
		})
	}
	n.mu.Unlock()
	if ok {
		n.ring()
	}
}

// unsent takes every event not yet sent on this stream, all tasks together,
// as the agent's outbox does (one batch per flush).
func (n *simNode) unsent() []*podiumv1.TaskEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*podiumv1.TaskEvent
	for _, t := range n.tasks {
		out = append(out, t.events[t.sent:]...)
		t.sent = len(t.events)
	}
	return out
}

// observer is told what the simulated nodes see; the measurement hangs off it.
type observer interface {
	assigned(task string, at time.Time)
	accepted(task string, at time.Time) // the coordinator acked the PROVISIONING event
	finished(task string, at time.Time) // the coordinator acked the SUCCEEDED event
}

// fleet is the simulated nodes as the agent behaves: benchkit.Fleet speaks
// the protocol (Hello, HelloAck, heartbeats at the interval it gives,
// reconnects) and this says what a node does with its tasks. Hello lists what
// the node still holds; for every Assign it reports PROVISIONING at once
// (accepting it), then RUNNING and SUCCEEDED (exit 0) so its slot comes free;
// events are re-sent after a reconnect from the acked high-water mark.
// Nothing is mocked on the coordinator's side.
type fleet struct {
	*benchkit.Fleet
	nodes []*simNode
	cfg   config
	obs   observer

	assigns  atomic.Int64 // Assign messages received
	repeats  atomic.Int64 // Assigns of an attempt the node already had
	rejected atomic.Int64 // Assigns refused for want of a slot
	cancels  atomic.Int64
	other    atomic.Int64 // NodeConfig, Inject, a later HelloAck

	// hold makes nodes accept their tasks (PROVISIONING) and keep them there
	// until release: a phase that measures dispatch alone, as the pgbench
	// reference does, without the rest of each task's life alongside.
	heldMu  sync.Mutex
	holding bool // guarded by heldMu, so no Assign slips past a release
	kept    []heldTask
}

type heldTask struct {
	n *simNode
	k attemptKey
}

// hold makes nodes keep the tasks they accept from now until release.
func (f *fleet) hold() {
	f.heldMu.Lock()
	f.holding = true
	f.heldMu.Unlock()
}

// release stops holding and lets every held task run its course: RUNNING and
// SUCCEEDED after the usual delays.
func (f *fleet) release() {
	f.heldMu.Lock()
	f.holding = false
	held := f.kept
	f.kept = nil
	f.heldMu.Unlock()
	for _, h := range held {
		f.runCourse(h.n, h.k)
	}
}

// runCourse reports a task RUNNING after startDelay and SUCCEEDED runTime
// later. The second timer is set by the first: two timers set at once can
// fire out of order on a loaded machine, and a node never reports a task
// succeeded before it reports it running.
func (f *fleet) runCourse(n *simNode, k attemptKey) {
	time.AfterFunc(f.cfg.startDelay, func() {
		n.emit(k, podiumv1.TaskState_TASK_STATE_RUNNING, nil)
		time.AfterFunc(f.cfg.runTime, func() {
			var zero int32
			n.emit(k, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero)
		})
	})
}

func newFleet(url string, creds []benchkit.NodeCred, cfg config, obs observer) *fleet {
	f := &fleet{cfg: cfg, obs: obs}
	for range creds {
		f.nodes = append(f.nodes, &simNode{tasks: map[attemptKey]*simTask{}, kick: make(chan struct{}, 1)})
	}
	f.Fleet = benchkit.NewFleet(cfg.FleetConfig(url, creds, 10*time.Second), f)
	return f
}

// Hello lists the attempts the node still holds.
func (f *fleet) Hello(i int, h *podiumv1.Hello) {
	n := f.nodes[i]
	n.mu.Lock()
	for k, t := range n.tasks {
		h.Running = append(h.Running, &podiumv1.RunningTask{TaskId: k.task, Attempt: k.attempt, LastSeq: uint64(len(t.events))})
	}
	n.mu.Unlock()
	h.Capacity = f.capacity()
}

// Adopt settles the HelloAck's verdict on what the Hello listed: keep and
// re-send from the stored high-water mark, or drop.
func (f *fleet) Adopt(i int, ack *podiumv1.HelloAck) {
	n := f.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tasks {
		t.sent = int(t.acked) // a new stream: everything unacked goes again
	}
	for _, a := range ack.GetAdopt() {
		k := attemptKey{a.GetTaskId(), a.GetAttempt()}
		t, ok := n.tasks[k]
		if !ok {
			continue
		}
		if !a.GetKeep() {
			delete(n.tasks, k)
			continue
		}
		t.acked = max(t.acked, a.GetAckedSeq())
		t.sent = min(int(t.acked), len(t.events))
	}
	if len(n.tasks) > 0 {
		n.ring()
	}
}

func (f *fleet) capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 64, MemoryMb: 256 << 10, DiskFreeMb: 1 << 20, MaxTasks: f.cfg.maxTasks}
}

func (f *fleet) Heartbeat(i int) *podiumv1.Heartbeat {
	n := f.nodes[i]
	n.mu.Lock()
	held := int32(len(n.tasks))
	n.mu.Unlock()
	return &podiumv1.Heartbeat{Capacity: f.capacity(), RunningTasks: held, FreeSlots: max(0, f.cfg.maxTasks-held)}
}

func (f *fleet) Ready(i int) <-chan struct{} { return f.nodes[i].kick }

func (f *fleet) Unsent(i int) []*podiumv1.TaskEvent { return f.nodes[i].unsent() }

// Handle is what a node does with one message from the coordinator.
func (f *fleet) Handle(i int, m *podiumv1.StreamResponse) {
	n := f.nodes[i]
	switch body := m.GetMsg().(type) {
	case *podiumv1.StreamResponse_Assign:
		at := time.Now()
		f.assigns.Add(1)
		a := body.Assign
		k := attemptKey{a.GetTaskId(), a.GetAttempt()}
		n.mu.Lock()
		_, repeat := n.tasks[k]
		full := !repeat && int32(len(n.tasks)) >= f.cfg.maxTasks
		if !repeat {
			n.tasks[k] = &simTask{}
		}
		n.mu.Unlock()
		if repeat {
			f.repeats.Add(1)
			return
		}
		f.obs.assigned(k.task, at)
		if full {
			// The agent's answer when it has no slot: give the task back.
			f.rejected.Add(1)
			n.emit(k, podiumv1.TaskState_TASK_STATE_QUEUED, nil)
			return
		}
		n.emit(k, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil)
		f.heldMu.Lock()
		if f.holding {
			f.kept = append(f.kept, heldTask{n, k})
			f.heldMu.Unlock()
			return
		}
		f.heldMu.Unlock()
		f.runCourse(n, k)
	case *podiumv1.StreamResponse_Ack:
		a := body.Ack
		k := attemptKey{a.GetTaskId(), a.GetAttempt()}
		at := time.Now()
		n.mu.Lock()
		t, ok := n.tasks[k]
		var before uint64
		var final bool
		if ok {
			before = t.acked
			t.acked = max(t.acked, a.GetAckedSeq())
			final = len(t.events) > 0 && t.acked >= uint64(len(t.events)) && isEnd(t.events[len(t.events)-1])
			if final {
				delete(n.tasks, k)
			}
		}
		n.mu.Unlock()
		if !ok {
			return
		}
		if before == 0 && a.GetAckedSeq() >= 1 {
			f.obs.accepted(k.task, at)
		}
		if final {
			f.obs.finished(k.task, at)
		}
	case *podiumv1.StreamResponse_Cancel:
		f.cancels.Add(1)
		k := attemptKey{body.Cancel.GetTaskId(), body.Cancel.GetAttempt()}
		n.mu.Lock()
		delete(n.tasks, k)
		n.mu.Unlock()
	default:
		f.other.Add(1)
	}
}

// isEnd reports whether an event is the last one a node sends for an attempt:
// a terminal status, or giving the task back.
func isEnd(ev *podiumv1.TaskEvent) bool {
	switch ev.GetStatus().GetState() {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_QUEUED:
		return true
	}
	return false
}

// held is how many attempts the fleet holds right now.
func (f *fleet) held() int {
	total := 0
	for _, n := range f.nodes {
		n.mu.Lock()
		total += len(n.tasks)
		n.mu.Unlock()
	}
	return total
}
