package benchkit

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// AttemptKey names one attempt of a task, as the protocol does.
type AttemptKey struct {
	Task    string
	Attempt int32
}

// SimTask is one assignment a simulated node holds: the events it has made
// so far (event i has seq i+1), how many of them went out on the current
// stream, how many the coordinator has acknowledged, and how many bytes of
// output it has printed.
type SimTask struct {
	events []*podiumv1.TaskEvent
	sent   int
	acked  uint64
	// Offset is the task's stdout bytes so far.
	Offset uint64
}

// Last is the task's latest event (nil before the first).
func (t *SimTask) Last() *podiumv1.TaskEvent {
	if len(t.events) == 0 {
		return nil
	}
	return t.events[len(t.events)-1]
}

// SimNode is a simulated node's state that outlives its streams: the tasks
// it holds and a doorbell for its sender. Its methods are safe from any
// goroutine (a task's timers, the stream's sender and receiver).
type SimNode struct {
	mu      sync.Mutex
	tasks   map[AttemptKey]*SimTask
	kick    chan struct{} // capacity 1: "there are unsent events"
	lingers bool          // guarded by mu: a delayed ring is pending
}

func (n *SimNode) ring() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// add appends the next event of a task the node still holds; false if it
// holds it no more (cancelled).
func (n *SimNode) add(k AttemptKey, body func(*podiumv1.TaskEvent, *SimTask)) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.tasks[k]
	if !ok {
		return false
	}
	ev := &podiumv1.TaskEvent{TaskId: k.Task, Attempt: k.Attempt, Seq: uint64(len(t.events) + 1), Time: timestamppb.Now()}
	body(ev, t)
	t.events = append(t.events, ev)
	return true
}

// Status reports a state change of a task the node holds; it goes out at
// once, as the agent sends a status change.
func (n *SimNode) Status(k AttemptKey, state podiumv1.TaskState, exit *int32) {
	if n.add(k, func(ev *podiumv1.TaskEvent, _ *SimTask) {
		ev.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: state, ExitCode: exit}}
	}) {
		n.ring()
	}
}

// Log appends a chunk of a task's stdout; it goes out after linger, with
// whatever else the node printed meanwhile, as the agent's outbox batches a
// burst.
func (n *SimNode) Log(k AttemptKey, data []byte, linger time.Duration) {
	if !n.add(k, func(ev *podiumv1.TaskEvent, t *SimTask) {
		ev.Body = &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Offset: t.Offset, Data: data}}
		t.Offset += uint64(len(data))
	}) {
		return
	}
	n.mu.Lock()
	if n.lingers {
		n.mu.Unlock()
		return
	}
	n.lingers = true
	n.mu.Unlock()
	time.AfterFunc(linger, func() {
		n.mu.Lock()
		n.lingers = false
		n.mu.Unlock()
		n.ring()
	})
}

// unsent takes every event not yet sent on this stream, all tasks together,
// as the agent's outbox does (one batch per flush).
func (n *SimNode) unsent() []*podiumv1.TaskEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*podiumv1.TaskEvent
	for _, t := range n.tasks {
		out = append(out, t.events[t.sent:]...)
		t.sent = len(t.events)
	}
	return out
}

// TaskHooks is what one benchmark's nodes do with their tasks beyond what
// every simulated node does (TaskFleet).
type TaskHooks struct {
	// Assigned, if set, is told of every new assignment when it arrives,
	// before the node accepts or refuses it.
	Assigned func(k AttemptKey, at time.Time)
	// Accepted plays a task the node accepted (it has reported
	// PROVISIONING): its events, through n.Status and n.Log, until a
	// terminal status.
	Accepted func(n *SimNode, k AttemptKey)
	// Acked, if set, is told of each acknowledgement of an attempt the node
	// holds: first when it is the first (the coordinator stored the
	// acceptance), and done non-nil when the attempt's last event, a
	// terminal status or giving the task back, is acknowledged and the node
	// lets the attempt go.
	Acked func(k AttemptKey, first bool, done *SimTask, at time.Time)
}

// TaskFleet is simulated nodes that treat tasks as the agent does, over
// Fleet's protocol (Hello, HelloAck, heartbeats, reconnects): Hello lists
// the attempts a node still holds; an Assign is accepted (PROVISIONING) when
// the node has a free slot and given back (QUEUED) when it has none, and a
// repeated one is ignored; a Cancel drops the task; events go out again after
// a reconnect from the acknowledged high-water mark; an attempt is let go once
// its last event is acknowledged. What an accepted task then does is the
// benchmark's (TaskHooks). Nothing is mocked on the coordinator's side.
type TaskFleet struct {
	*Fleet
	nodes    []*SimNode
	maxTasks int32
	hooks    TaskHooks

	Assigns  atomic.Int64 // Assign messages received
	Repeats  atomic.Int64 // Assigns of an attempt the node already had
	Rejected atomic.Int64 // Assigns given back for want of a slot
	Cancels  atomic.Int64
	Other    atomic.Int64 // NodeConfig, Inject, a later HelloAck
}

// NewTaskFleet makes one simulated node per credential in cfg, each with
// maxTasks slots. Start it with Fleet's methods.
func NewTaskFleet(cfg FleetConfig, maxTasks int32, hooks TaskHooks) *TaskFleet {
	f := &TaskFleet{maxTasks: maxTasks, hooks: hooks}
	for range cfg.Creds {
		f.nodes = append(f.nodes, &SimNode{tasks: map[AttemptKey]*SimTask{}, kick: make(chan struct{}, 1)})
	}
	f.Fleet = NewFleet(cfg, f)
	return f
}

func (f *TaskFleet) capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 64, MemoryMb: 256 << 10, DiskFreeMb: 1 << 20, MaxTasks: f.maxTasks}
}

// Held is how many attempts the fleet holds right now.
func (f *TaskFleet) Held() int {
	total := 0
	for _, n := range f.nodes {
		n.mu.Lock()
		total += len(n.tasks)
		n.mu.Unlock()
	}
	return total
}

// Hello lists the attempts the node still holds.
func (f *TaskFleet) Hello(i int, h *podiumv1.Hello) {
	n := f.nodes[i]
	n.mu.Lock()
	for k, t := range n.tasks {
		h.Running = append(h.Running, &podiumv1.RunningTask{TaskId: k.Task, Attempt: k.Attempt, LastSeq: uint64(len(t.events))})
	}
	n.mu.Unlock()
	h.Capacity = f.capacity()
}

// Adopt settles the HelloAck's verdict on what the Hello listed: keep and
// re-send from the stored high-water mark, or drop.
func (f *TaskFleet) Adopt(i int, ack *podiumv1.HelloAck) {
	n := f.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tasks {
		t.sent = int(t.acked) // a new stream: everything unacked goes again
	}
	for _, a := range ack.GetAdopt() {
		k := AttemptKey{a.GetTaskId(), a.GetAttempt()}
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

func (f *TaskFleet) Heartbeat(i int) *podiumv1.Heartbeat {
	n := f.nodes[i]
	n.mu.Lock()
	held := int32(len(n.tasks))
	n.mu.Unlock()
	return &podiumv1.Heartbeat{Capacity: f.capacity(), RunningTasks: held, FreeSlots: max(0, f.maxTasks-held)}
}

func (f *TaskFleet) Ready(i int) <-chan struct{} { return f.nodes[i].kick }

func (f *TaskFleet) Unsent(i int) []*podiumv1.TaskEvent { return f.nodes[i].unsent() }

// Handle is what a node does with one message from the coordinator.
func (f *TaskFleet) Handle(i int, m *podiumv1.StreamResponse) {
	n := f.nodes[i]
	switch body := m.GetMsg().(type) {
	case *podiumv1.StreamResponse_Assign:
		at := time.Now()
		f.Assigns.Add(1)
		a := body.Assign
		k := AttemptKey{a.GetTaskId(), a.GetAttempt()}
		n.mu.Lock()
		_, repeat := n.tasks[k]
		full := !repeat && int32(len(n.tasks)) >= f.maxTasks
		if !repeat {
			n.tasks[k] = &SimTask{}
		}
		n.mu.Unlock()
		if repeat {
			f.Repeats.Add(1)
			return
		}
		if f.hooks.Assigned != nil {
			f.hooks.Assigned(k, at)
		}
		if full {
			// The agent's answer when it has no slot: give the task back.
			f.Rejected.Add(1)
			n.Status(k, podiumv1.TaskState_TASK_STATE_QUEUED, nil)
			return
		}
		n.Status(k, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil)
		f.hooks.Accepted(n, k)
	case *podiumv1.StreamResponse_Ack:
		a := body.Ack
		k := AttemptKey{a.GetTaskId(), a.GetAttempt()}
		at := time.Now()
		n.mu.Lock()
		t, ok := n.tasks[k]
		var before uint64
		var done *SimTask
		if ok {
			before = t.acked
			t.acked = max(t.acked, a.GetAckedSeq())
			if len(t.events) > 0 && t.acked >= uint64(len(t.events)) && IsLastEvent(t.Last()) {
				delete(n.tasks, k)
				done = t
			}
		}
		n.mu.Unlock()
		if ok && f.hooks.Acked != nil {
			f.hooks.Acked(k, before == 0 && a.GetAckedSeq() >= 1, done, at)
		}
	case *podiumv1.StreamResponse_Cancel:
		f.Cancels.Add(1)
		k := AttemptKey{body.Cancel.GetTaskId(), body.Cancel.GetAttempt()}
		n.mu.Lock()
		delete(n.tasks, k)
		n.mu.Unlock()
	default:
		f.Other.Add(1)
	}
}

// IsLastEvent reports whether an event is the last one a node sends for an
// attempt: a terminal status, or giving the task back.
func IsLastEvent(ev *podiumv1.TaskEvent) bool {
	switch ev.GetStatus().GetState() {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_QUEUED:
		return true
	}
	return false
}
