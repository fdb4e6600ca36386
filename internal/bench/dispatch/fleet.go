package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

type nodeStream = connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]

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

// fleet is N simulated nodes, each one real Connect stream speaking the node
// protocol as the agent does: Hello (listing what it still holds), wait for
// HelloAck, heartbeat at the interval it gives, and for every Assign report
// PROVISIONING at once (accepting it), then RUNNING and SUCCEEDED (exit 0) so
// its slot comes free; events are re-sent after a reconnect from the acked
// high-water mark. Nothing is mocked on the coordinator's side.
type fleet struct {
	creds      []benchkit.NodeCred
	nodes      []*simNode
	clients    []podiumv1connect.NodeServiceClient
	transports []*http.Transport
	inflight   chan struct{} // bounds Hellos awaiting their HelloAck
	cfg        config
	obs        observer

	began  time.Time
	allUp  chan struct{}
	upOnce sync.Once
	upAt   atomic.Int64
	mu     sync.Mutex
	errs   map[string]int

	connected atomic.Int64 // nodes holding a stream right now
	retries   atomic.Int64 // failed Hellos
	dropped   atomic.Int64 // streams that ended without the bench asking
	assigns   atomic.Int64 // Assign messages received
	repeats   atomic.Int64 // Assigns of an attempt the node already had
	rejected  atomic.Int64 // Assigns refused for want of a slot
	acks      atomic.Int64
	cancels   atomic.Int64
	other     atomic.Int64 // NodeConfig, Inject, a later HelloAck
	batches   atomic.Int64 // EventBatches sent

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
	nc := (len(creds) + cfg.perConn - 1) / cfg.perConn
	f := &fleet{creds: creds, inflight: make(chan struct{}, cfg.inflight), cfg: cfg, obs: obs,
		allUp: make(chan struct{}), errs: map[string]int{}}
	for range creds {
		f.nodes = append(f.nodes, &simNode{tasks: map[attemptKey]*simTask{}, kick: make(chan struct{}, 1)})
	}
	for range nc {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t := &http.Transport{Protocols: &p}
		f.transports = append(f.transports, t)
		f.clients = append(f.clients, podiumv1connect.NewNodeServiceClient(&http.Client{Transport: t}, url))
	}
	return f
}

// start runs every node until ctx ends; the returned channel closes when all
// of them have stopped.
func (f *fleet) start(ctx context.Context) <-chan struct{} {
	f.began = time.Now()
	var wg sync.WaitGroup
	for i := range f.creds {
		wg.Add(1)
		go func() { defer wg.Done(); f.runNode(ctx, i) }()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		for _, t := range f.transports {
			t.CloseIdleConnections()
		}
		close(done)
	}()
	return done
}

// runNode is one node's life: connect, serve the stream until it ends,
// reconnect with the protocol's backoff (1 s doubling to 30 s, jittered).
func (f *fleet) runNode(ctx context.Context, i int) {
	backoff := time.Second
	for ctx.Err() == nil {
		select {
		case f.inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		st, ack, sctx, cancel, err := f.hello(ctx, i)
		<-f.inflight
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.retries.Add(1)
			f.noteErr("hello", err)
			jitter := time.Duration(rand.Int64N(int64(backoff) / 2))
			if sleep(ctx, backoff/2+jitter) != nil {
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		f.adopt(i, ack)
		if f.connected.Add(1) == int64(len(f.creds)) {
			f.upOnce.Do(func() { f.upAt.Store(time.Now().UnixNano()); close(f.allUp) })
		}
		err = f.serve(sctx, i, st, ack, cancel)
		f.connected.Add(-1)
		if ctx.Err() != nil {
			return
		}
		f.dropped.Add(1)
		f.noteErr("stream", err)
	}
}

// hello opens a stream, says Hello (listing the attempts the node still holds)
// and waits for the HelloAck, within helloTimeout.
func (f *fleet) hello(ctx context.Context, i int) (*nodeStream, *podiumv1.HelloAck, context.Context, context.CancelFunc, error) {
	n := f.nodes[i]
	var running []*podiumv1.RunningTask
	n.mu.Lock()
	for k, t := range n.tasks {
		running = append(running, &podiumv1.RunningTask{TaskId: k.task, Attempt: k.attempt, LastSeq: uint64(len(t.events))})
	}
	n.mu.Unlock()

	sctx, cancel := context.WithCancel(ctx)
	st := f.clients[i%len(f.clients)].Stream(sctx)
	deadline := time.Now().Add(f.cfg.helloTimeout)
	timer := time.AfterFunc(f.cfg.helloTimeout, cancel)
	err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: f.creds[i].ID, NodeKey: f.creds[i].Key, AgentVersion: "bench", Hostname: f.creds[i].ID,
		Capacity: f.capacity(), Running: running,
	}}})
	expired := !timer.Stop()
	var m *podiumv1.StreamResponse
	if !expired && (err == nil || errors.Is(err, io.EOF)) {
		// Once the response has begun, cancelling alone does not end a
		// Receive, so the deadline also closes the request side.
		timer = time.AfterFunc(time.Until(deadline), func() { cancel(); _ = st.CloseRequest() })
		m, err = st.Receive()
		expired = !timer.Stop()
	}
	if expired {
		err = fmt.Errorf("no HelloAck within %s (%v)", f.cfg.helloTimeout, err)
	}
	if err == nil && m.GetHelloAck() == nil {
		err = fmt.Errorf("first message was %T, not a HelloAck", m.GetMsg())
	}
	if err != nil {
		cancel()
		_ = st.CloseRequest()
		_ = st.CloseResponse()
		return nil, nil, nil, nil, err
	}
	return st, m.GetHelloAck(), sctx, cancel, nil
}

// adopt settles the HelloAck's verdict on what the Hello listed: keep and
// re-send from the stored high-water mark, or drop.
func (f *fleet) adopt(i int, ack *podiumv1.HelloAck) {
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

// serve runs the stream: a sender goroutine (the stream's only writer)
// heartbeats and flushes events, this one reads. The sender closes the request
// side when it stops, which is what ends a Receive once ctx is cancelled.
func (f *fleet) serve(ctx context.Context, i int, st *nodeStream, ack *podiumv1.HelloAck, cancel context.CancelFunc) error {
	interval := time.Duration(ack.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = 10 * time.Second
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		f.send(ctx, i, st, interval)
		_ = st.CloseRequest()
	}()
	var err error
	for err == nil {
		var m *podiumv1.StreamResponse
		if m, err = st.Receive(); err == nil {
			f.handle(i, m)
		}
	}
	cancel()
	<-sent
	_ = st.CloseResponse()
	return err
}

func (f *fleet) send(ctx context.Context, i int, st *nodeStream, interval time.Duration) {
	n := f.nodes[i]
	// Heartbeat phases spread over one interval, as a real fleet's are.
	phase := time.Duration(int64(interval) * int64(i) / int64(len(f.creds)))
	next := f.began.Add(phase)
	for now := time.Now(); !next.After(now); {
		next = next.Add(interval)
	}
	hb := time.NewTimer(time.Until(next))
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			n.mu.Lock()
			held := int32(len(n.tasks))
			n.mu.Unlock()
			err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
				Capacity: f.capacity(), RunningTasks: held, FreeSlots: max(0, f.cfg.maxTasks-held)}}})
			if err != nil {
				return // the receive loop reports why
			}
			next = next.Add(interval)
			hb.Reset(time.Until(next))
		case <-n.kick:
			evs := n.unsent()
			if len(evs) == 0 {
				continue
			}
			if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{
				Events: &podiumv1.EventBatch{Events: evs}}}); err != nil {
				return
			}
			f.batches.Add(1)
		}
	}
}

// handle is what a node does with one message from the coordinator.
func (f *fleet) handle(i int, m *podiumv1.StreamResponse) {
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
		f.acks.Add(1)
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

func (f *fleet) noteErr(what string, err error) {
	key := what + ": " + err.Error()
	if len(key) > 160 {
		key = key[:160] + "…"
	}
	f.mu.Lock()
	f.errs[key]++
	f.mu.Unlock()
}

func (f *fleet) errSamples() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.errs))
	for k, v := range f.errs {
		out[k] = v
	}
	return out
}

func (f *fleet) connectTime() time.Duration {
	if at := f.upAt.Load(); at != 0 {
		return time.Unix(0, at).Sub(f.began)
	}
	return time.Since(f.began)
}
