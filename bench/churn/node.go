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
	offset uint64 // stdout bytes so far
}

// simNode is a node's state that outlives its streams: the tasks it holds and
// a doorbell for its sender.
type simNode struct {
	mu      sync.Mutex
	tasks   map[attemptKey]*simTask
	kick    chan struct{} // capacity 1: "there are unsent events"
	lingers bool          // guarded by mu: a delayed ring is pending
}

func (n *simNode) ring() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// append adds the next event of a task the node still holds; false if it
// holds it no more (cancelled).
func (n *simNode) append(k attemptKey, body func(*podiumv1.TaskEvent, *simTask)) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.tasks[k]
	if !ok {
		return false
	}
	ev := &podiumv1.TaskEvent{TaskId: k.task, Attempt: k.attempt, Seq: uint64(len(t.events) + 1), Time: timestamppb.Now()}
	body(ev, t)
	t.events = append(t.events, ev)
	return true
}

func (n *simNode) status(k attemptKey, state podiumv1.TaskState, exit *int32) {
	if n.append(k, func(ev *podiumv1.TaskEvent, _ *simTask) {
		ev.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: state, ExitCode: exit}}
	}) {
		// The agent sends a status change at once.
		n.ring()
	}
}

// log appends a chunk of output; it goes out after linger, with whatever
// else the node printed meanwhile, as the agent's outbox batches a burst.
func (n *simNode) log(k attemptKey, data []byte, linger time.Duration) {
	if !n.append(k, func(ev *podiumv1.TaskEvent, t *simTask) {
		ev.Body = &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Offset: t.offset, Data: data}}
		t.offset += uint64(len(data))
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

// fleet is the simulated nodes of one phase: benchkit.Fleet speaks the
// protocol (Hello, HelloAck, heartbeats, reconnects, one HTTP/2 connection
// per node by default) and this says what a node does with a task: accept it
// (PROVISIONING), report RUNNING, print the task's output in chunks over
// -run-time, report SUCCEEDED (exit 0). Events are re-sent after a reconnect
// from the acked high-water mark, as the agent does.
type fleet struct {
	*benchkit.Fleet
	cfg    config
	nodes  []*simNode
	corpus *corpus
	// done is called once per task, when the coordinator has acknowledged
	// its terminal event: the submit window's token comes back.
	done func()

	ordinal  atomic.Int64 // tasks accepted so far: picks each task's output
	assigns  atomic.Int64
	repeats  atomic.Int64
	rejected atomic.Int64
	cancels  atomic.Int64
	finished atomic.Int64
	outBytes atomic.Int64 // output bytes the coordinator acknowledged
	lastDone atomic.Int64 // UnixNano of the last finished task
}

func newFleet(url string, creds []benchkit.NodeCred, cfg config, c *corpus, done func()) *fleet {
	f := &fleet{cfg: cfg, corpus: c, done: done}
	for range creds {
		f.nodes = append(f.nodes, &simNode{tasks: map[attemptKey]*simTask{}, kick: make(chan struct{}, 1)})
	}
	f.Fleet = benchkit.NewFleet(benchkit.FleetConfig{URL: url, Creds: creds, PerConn: cfg.perConn, Inflight: cfg.inflight,
		HelloTimeout: cfg.helloTimeout, Interval: 10 * time.Second}, f)
	return f
}

func (f *fleet) capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 64, MemoryMb: 256 << 10, DiskFreeMb: 1 << 20, MaxTasks: f.cfg.maxTasks}
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

// Adopt settles the HelloAck's verdict on what the Hello listed.
func (f *fleet) Adopt(i int, ack *podiumv1.HelloAck) {
	n := f.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tasks {
		t.sent = int(t.acked)
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
		switch {
		case repeat:
			f.repeats.Add(1)
		case full:
			// The agent's answer when it has no slot: give the task back.
			f.rejected.Add(1)
			n.status(k, podiumv1.TaskState_TASK_STATE_QUEUED, nil)
		default:
			n.status(k, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil)
			f.run(n, k)
		}
	case *podiumv1.StreamResponse_Ack:
		a := body.Ack
		k := attemptKey{a.GetTaskId(), a.GetAttempt()}
		n.mu.Lock()
		t, ok := n.tasks[k]
		var final, gaveBack bool
		var out int64
		if ok {
			t.acked = max(t.acked, a.GetAckedSeq())
			final = len(t.events) > 0 && t.acked >= uint64(len(t.events)) && isEnd(t.events[len(t.events)-1])
			if final {
				delete(n.tasks, k)
				out = int64(t.offset)
				gaveBack = t.events[len(t.events)-1].GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_QUEUED
			}
		}
		n.mu.Unlock()
		// A task given back is assigned again later: not finished yet.
		if final && !gaveBack {
			f.outBytes.Add(out)
			f.finished.Add(1)
			f.lastDone.Store(time.Now().UnixNano())
			f.done()
		}
	case *podiumv1.StreamResponse_Cancel:
		f.cancels.Add(1)
		k := attemptKey{body.Cancel.GetTaskId(), body.Cancel.GetAttempt()}
		n.mu.Lock()
		delete(n.tasks, k)
		n.mu.Unlock()
	}
}

// run plays one task after it is accepted: RUNNING after -start-delay, then
// its output in -chunk pieces spread over -run-time, then SUCCEEDED. Each
// step's timer is set by the one before, so the events are made in order
// however loaded the machine is.
func (f *fleet) run(n *simNode, k attemptKey) {
	header, body := f.corpus.output(f.ordinal.Add(1), k.task, f.cfg.output)
	out := append(header, body...)
	var chunks [][]byte
	for len(out) > 0 {
		c := min(len(out), f.cfg.chunk)
		chunks = append(chunks, out[:c:c])
		out = out[c:]
	}
	gap := f.cfg.runTime / time.Duration(len(chunks)+1)
	var step func(int)
	step = func(j int) {
		if j < len(chunks) {
			n.log(k, chunks[j], f.cfg.linger)
			time.AfterFunc(gap, func() { step(j + 1) })
			return
		}
		var zero int32
		n.status(k, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero)
	}
	time.AfterFunc(f.cfg.startDelay, func() {
		n.status(k, podiumv1.TaskState_TASK_STATE_RUNNING, nil)
		time.AfterFunc(gap, func() { step(0) })
	})
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
