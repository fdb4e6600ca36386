package main

import (
	"crypto/sha256"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// floodTask is one assignment a simulated node floods with output: the events
// made and not yet acknowledged (pending[0] has seq acked+1), how many of
// them went out on the current stream, and the checksum of the output so far.
type floodTask struct {
	id           string
	attempt      int32
	ordinal      int64 // picks the task's window of the corpus
	size         int64 // output bytes in all
	made         int64 // output bytes made into events so far
	lastSeq      uint64
	acked        uint64
	pending      []*podiumv1.TaskEvent
	pendingBytes int
	sent         int
	ended        bool // the terminal status is made
	sum          hash.Hash
	began        time.Time
}

// floodNode is a node's state that outlives its streams.
type floodNode struct {
	mu    sync.Mutex
	tasks []*floodTask // in assignment order; turn rotates over them
	turn  int
	kick  chan struct{}
}

func (n *floodNode) ring() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// finished is a task whose terminal event the coordinator acknowledged: what
// it printed and when.
type finished struct {
	id       string
	bytes    int64
	sum      [sha256.Size]byte
	began    time.Time // its first event was made
	ackedAll time.Time // its terminal event was acknowledged
}

// flood is the simulated fleet: benchkit.Fleet speaks the protocol, and this
// says what a node does with a task: report PROVISIONING and RUNNING, print
// the task's output in -chunk events as fast as the coordinator acknowledges
// them (at most -window bytes unacknowledged per task, at most -message bytes
// per message), then SUCCEEDED. Nothing waits on a timer: the only brake is
// the coordinator's acks, which is what "as fast as the protocol allows"
// means. After a reconnect the unacknowledged events are sent again, as the
// agent does.
type flood struct {
	*benchkit.Fleet
	cfg    config
	corpus *corpus
	nodes  []*floodNode

	ordinal atomic.Int64
	assigns atomic.Int64
	repeats atomic.Int64
	mu      sync.Mutex
	done    []finished
	firstAt atomic.Int64 // UnixNano of the first event made
}

func newFlood(url string, creds []benchkit.NodeCred, cfg config, c *corpus) *flood {
	f := &flood{cfg: cfg, corpus: c}
	for range creds {
		f.nodes = append(f.nodes, &floodNode{kick: make(chan struct{}, 1)})
	}
	f.Fleet = benchkit.NewFleet(benchkit.FleetConfig{URL: url, Creds: creds, PerConn: cfg.perConn, Inflight: 100,
		HelloTimeout: 15 * time.Second, Interval: 10 * time.Second}, f)
	return f
}

func (f *flood) capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 64, MemoryMb: 256 << 10, DiskFreeMb: 1 << 20, MaxTasks: int32(f.cfg.perNode)}
}

// Hello lists the attempts the node still holds.
func (f *flood) Hello(i int, h *podiumv1.Hello) {
	n := f.nodes[i]
	n.mu.Lock()
	for _, t := range n.tasks {
		h.Running = append(h.Running, &podiumv1.RunningTask{TaskId: t.id, Attempt: t.attempt, LastSeq: t.lastSeq})
	}
	n.mu.Unlock()
	h.Capacity = f.capacity()
}

// Adopt settles the HelloAck's verdict on what the Hello listed: events not
// acknowledged go out again on the new stream.
func (f *flood) Adopt(i int, ack *podiumv1.HelloAck) {
	n := f.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.tasks {
		t.sent = 0
	}
	for _, a := range ack.GetAdopt() {
		for _, t := range n.tasks {
			if t.id == a.GetTaskId() && t.attempt == a.GetAttempt() {
				t.ack(a.GetAckedSeq())
			}
		}
	}
	n.ring()
}

func (f *flood) Heartbeat(i int) *podiumv1.Heartbeat {
	n := f.nodes[i]
	n.mu.Lock()
	held := int32(len(n.tasks))
	n.mu.Unlock()
	return &podiumv1.Heartbeat{Capacity: f.capacity(), RunningTasks: held, FreeSlots: max(0, int32(f.cfg.perNode)-held)}
}

func (f *flood) Ready(i int) <-chan struct{} { return f.nodes[i].kick }

// Unsent tops every task's window up with new events and takes, task by task
// starting with the next in turn, what this stream has not sent yet, up to
// one message's worth. If more is left it rings again, so the sender comes
// straight back.
func (f *flood) Unsent(i int) []*podiumv1.TaskEvent {
	n := f.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*podiumv1.TaskEvent
	size, more := 0, false
	for j := range n.tasks {
		t := n.tasks[(n.turn+j)%len(n.tasks)]
		f.produce(t)
		for t.sent < len(t.pending) {
			ev := t.pending[t.sent]
			n := len(ev.GetLog().GetData()) + 64 // and its framing, roughly
			if (len(out) > 0 && size+n > f.cfg.message) || len(out) >= 1000 {
				more = true
				break
			}
			out = append(out, ev)
			size += n
			t.sent++
		}
	}
	if len(n.tasks) > 0 {
		n.turn = (n.turn + 1) % len(n.tasks)
	}
	if more {
		n.ring()
	}
	return out
}

// produce makes events until the task's unacknowledged output fills its
// window or the task has printed everything and ended.
func (f *flood) produce(t *floodTask) {
	now := time.Now()
	next := func(body func(*podiumv1.TaskEvent)) {
		t.lastSeq++
		ev := &podiumv1.TaskEvent{TaskId: t.id, Attempt: t.attempt, Seq: t.lastSeq, Time: timestamppb.New(now)}
		body(ev)
		t.pending = append(t.pending, ev)
	}
	if t.lastSeq == 0 {
		t.began = now
		f.firstAt.CompareAndSwap(0, now.UnixNano())
		for _, s := range []podiumv1.TaskState{podiumv1.TaskState_TASK_STATE_PROVISIONING, podiumv1.TaskState_TASK_STATE_RUNNING} {
			next(func(ev *podiumv1.TaskEvent) {
				ev.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}
			})
		}
	}
	for t.made < t.size && t.pendingBytes < f.cfg.window {
		data := f.corpus.chunk(t.ordinal, t.made, int(min(int64(f.cfg.chunk), t.size-t.made)))
		t.sum.Write(data)
		off := t.made
		next(func(ev *podiumv1.TaskEvent) {
			ev.Body = &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Offset: uint64(off), Data: data}}
		})
		t.made += int64(len(data))
		t.pendingBytes += len(data)
	}
	if t.made == t.size && !t.ended {
		t.ended = true
		var zero int32
		next(func(ev *podiumv1.TaskEvent) {
			ev.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_SUCCEEDED, ExitCode: &zero}}
		})
	}
}

// ack drops the events the coordinator has stored.
func (t *floodTask) ack(seq uint64) {
	if seq <= t.acked {
		return
	}
	k := min(int(seq-t.acked), len(t.pending))
	for _, ev := range t.pending[:k] {
		t.pendingBytes -= len(ev.GetLog().GetData())
	}
	t.pending = append(t.pending[:0:0], t.pending[k:]...)
	t.sent = max(0, t.sent-k)
	t.acked = seq
}

// Handle is what a node does with one message from the coordinator.
func (f *flood) Handle(i int, m *podiumv1.StreamResponse) {
	n := f.nodes[i]
	switch body := m.GetMsg().(type) {
	case *podiumv1.StreamResponse_Assign:
		f.assigns.Add(1)
		a := body.Assign
		size := f.cfg.output
		// A task whose command is ["flood", N] prints N bytes: that is how
		// `podium run`, which submits its own task, says how much.
		if c := a.GetSpec().GetCommand(); len(c) == 2 && c[0] == "flood" {
			if v, err := strconv.ParseInt(c[1], 10, 64); err == nil && v > 0 {
				size = v
			}
		}
		n.mu.Lock()
		for _, t := range n.tasks {
			if t.id == a.GetTaskId() && t.attempt == a.GetAttempt() {
				n.mu.Unlock()
				f.repeats.Add(1)
				return
			}
		}
		n.tasks = append(n.tasks, &floodTask{id: a.GetTaskId(), attempt: a.GetAttempt(), ordinal: f.ordinal.Add(1),
			size: size, lastSeq: a.GetAckedSeq(), acked: a.GetAckedSeq(), sum: sha256.New()})
		n.mu.Unlock()
		n.ring()
	case *podiumv1.StreamResponse_Ack:
		a := body.Ack
		n.mu.Lock()
		var fin *finished
		for j, t := range n.tasks {
			if t.id != a.GetTaskId() || t.attempt != a.GetAttempt() {
				continue
			}
			t.ack(a.GetAckedSeq())
			if t.ended && t.acked >= t.lastSeq {
				fin = &finished{id: t.id, bytes: t.size, began: t.began, ackedAll: time.Now()}
				copy(fin.sum[:], t.sum.Sum(nil))
				n.tasks = append(n.tasks[:j], n.tasks[j+1:]...)
				n.turn = 0
			}
			break
		}
		n.mu.Unlock()
		if fin != nil {
			f.mu.Lock()
			f.done = append(f.done, *fin)
			f.mu.Unlock()
		}
		n.ring()
	case *podiumv1.StreamResponse_Cancel:
		n.mu.Lock()
		for j, t := range n.tasks {
			if t.id == body.Cancel.GetTaskId() && t.attempt == body.Cancel.GetAttempt() {
				n.tasks = append(n.tasks[:j], n.tasks[j+1:]...)
				n.turn = 0
				break
			}
		}
		n.mu.Unlock()
	}
}

// finishedSoFar is a copy of the tasks finished so far.
func (f *flood) finishedSoFar() []finished {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]finished(nil), f.done...)
}
