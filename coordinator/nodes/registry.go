// Package nodes holds the node stream: it serves podium.v1.NodeService's
// Stream and UploadArtifact (coordinator/server joins them to
// coordinator/enroll's Enroll), checks a node's credentials, keeps the live
// sessions this replica holds and their heartbeats, delivers the commands
// stored for a node, and answers the events nodes push back once
// coordinator/ingest has stored them. coordinator/server makes it and runs it.
//
// The sessions are in memory because a node's stream terminates on exactly one
// replica, which is the only one that can write to it. Everything another
// replica needs to know about them is in Postgres: the session row names the
// replica and its epoch, commands are rows, and a NOTIFY tells the holder to
// look.
package nodes

import (
	"slices"
	"sync"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TaskCost is what one task takes out of a node's budget: its own limits plus
// every sidecar's, because a task's sidecars run on the same machine.
type TaskCost struct {
	CPU      float64
	MemoryMB int64
}

// Snapshot is what a live session knows of its node, as a value: a reader can
// work on its copy without holding the session's lock or racing the node's
// next heartbeat.
type Snapshot struct {
	NodeID       string
	Labels       []string
	FreeSlots    int32
	RunningTasks int32
	LastSeen     time.Time
	Draining     bool
	Capacity     *podiumv1.Capacity
	// FreeCPU and FreeMemoryMB are the capacity the node advertised minus what it
	// is committed to. Zero capacity means "unmeasured" and is no constraint, so
	// these are zero then too.
	FreeCPU        float64
	FreeMemoryMB   int64
	LastAssignedAt time.Time
}

// Session is one live node stream on this replica.
type Session struct {
	NodeID  string
	Epoch   int64
	Started time.Time
	// heartbeatAcks is whether the node asked for its heartbeats to be
	// answered (Hello.heartbeat_acks); set before the session runs.
	heartbeatAcks bool

	mu               sync.Mutex
	labels           []string
	draining         bool
	maxTasksOverride int32
	capacity         *podiumv1.Capacity
	lastSeen         time.Time
	lastAssignedAt   time.Time
	// lastBeat is the node's last heartbeat as recorded (nil before its
	// first), the pattern of the beats its output stands in for (heard).
	lastBeat *store.Heartbeat
	tasks    map[string]TaskCost // task id → what it is charged
	// busy are the slots the node still spends tearing down attempts the
	// control plane let go of at reconciliation; its heartbeats bring them
	// down (running), so its own word on what is free wins meanwhile.
	busy int32

	out outbox
	// sendWait is how long send waits for room in a full queue (sendWait).
	sendWait  time.Duration
	done      chan struct{}
	closeOnce sync.Once
	// ended is closed after the stream handler has released the node's lease,
	// so a replacement can take it.
	ended chan struct{}
}

func newSession(nodeID string, epoch int64) *Session {
	return &Session{
		NodeID: nodeID, Epoch: epoch, Started: time.Now(),
		tasks: map[string]TaskCost{}, lastSeen: time.Now(),
		out: newOutbox(maxQueued), sendWait: sendWait,
		done:  make(chan struct{}),
		ended: make(chan struct{}),
	}
}

// Done is closed when the session ends, whatever ended it.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close ends the session; the stream handler returns and the node reconnects.
func (s *Session) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// maxQueued bounds the messages waiting for a node's stream: a node that
// cannot take this many is not reading.
const maxQueued = 256

// sendWait is how long send waits for room in a full queue before it ends the
// session.
const sendWait = 10 * time.Second

// send queues a message for the node. It never blocks on a slow node for long:
// a node that cannot take maxQueued messages is not reading, and the session
// ends.
func (s *Session) send(m *podiumv1.StreamResponse) error {
	timeout := time.NewTimer(s.sendWait)
	defer timeout.Stop()
	for {
		select {
		case <-s.done:
			return ErrSessionClosed
		default:
		}
		if s.out.push(m) {
			return nil
		}
		select {
		case <-s.done:
			return ErrSessionClosed
		case <-s.out.room:
		case <-timeout.C:
			s.Close()
			return ErrSessionClosed
		}
	}
}

// trySend queues m on the stream without waiting: errBacklogged when the
// queue is full, ErrSessionClosed when the session has ended.
func (s *Session) trySend(m *podiumv1.StreamResponse) error {
	select {
	case <-s.done:
		return ErrSessionClosed
	default:
	}
	if !s.out.push(m) {
		return errBacklogged
	}
	return nil
}

// outbox is a session's queue of messages for its node, first in first out,
// holding at most max. It takes memory only while it holds something: most
// nodes are idle most of the time, and a buffer of max messages for each of
// tens of thousands of sessions (a buffered channel's) would be kept for
// nothing.
type outbox struct {
	max   int
	mu    sync.Mutex
	queue []*podiumv1.StreamResponse
	// ready is rung (capacity 1) when a message is queued; room when one
	// is taken from a full queue.
	ready, room chan struct{}
}

func newOutbox(max int) outbox {
	return outbox{max: max, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// push queues m, or reports that the queue is full.
func (o *outbox) push(m *podiumv1.StreamResponse) bool {
	o.mu.Lock()
	if len(o.queue) >= o.max {
		o.mu.Unlock()
		return false
	}
	o.queue = append(o.queue, m)
	o.mu.Unlock()
	ring(o.ready)
	return true
}

// pop takes the oldest message, if there is one. The queue's array is let
// go once it is empty.
func (o *outbox) pop() (*podiumv1.StreamResponse, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queue) == 0 {
		return nil, false
	}
	m := o.queue[0]
	o.queue[0] = nil
	if o.queue = o.queue[1:]; len(o.queue) == 0 {
		o.queue = nil
	}
	if len(o.queue) == o.max-1 {
		ring(o.room)
	}
	return m, true
}

// len is how many messages wait.
func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

// ring sends on a doorbell of capacity 1 without waiting: one ring pending
// is as good as many.
func ring(bell chan struct{}) {
	select {
	case bell <- struct{}{}:
	default:
	}
}

// Snapshot returns the session's state as a value.
func (s *Session) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{
		NodeID: s.NodeID, Labels: append([]string(nil), s.labels...), RunningTasks: int32(len(s.tasks)) + s.busy,
		LastSeen: s.lastSeen, Draining: s.draining, LastAssignedAt: s.lastAssignedAt,
	}
	if s.capacity != nil {
		snap.Capacity = &podiumv1.Capacity{CpuCores: s.capacity.CpuCores, MemoryMb: s.capacity.MemoryMb,
			DiskFreeMb: s.capacity.DiskFreeMb, MaxTasks: s.capacity.MaxTasks}
	}
	limit := snap.Capacity.GetMaxTasks()
	if s.maxTasksOverride > 0 {
		limit = s.maxTasksOverride
	}
	if !s.draining && limit > snap.RunningTasks {
		snap.FreeSlots = limit - snap.RunningTasks
	}
	var cpu float64
	var mem int64
	for _, c := range s.tasks {
		cpu += c.CPU
		mem += c.MemoryMB
	}
	if c := snap.Capacity.GetCpuCores(); c > 0 {
		snap.FreeCPU = max(c-cpu, 0)
	}
	if m := snap.Capacity.GetMemoryMb(); m > 0 {
		snap.FreeMemoryMB = max(m-mem, 0)
	}
	return snap
}

func (s *Session) configure(labels []string, draining bool, override int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels, s.draining, s.maxTasksOverride = labels, draining, override
}

// beat keeps hb as the node's last heartbeat.
func (s *Session) beat(hb store.Heartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastBeat = &hb
}

// heard says whether the node's output, received at now, should stand in for
// a heartbeat: the node has heartbeated on this stream, and its last recorded
// beat is at least interval old. The beat returned is that one, at now, with
// the running count unknown (its capacity cannot have changed unsaid: a change
// comes in a heartbeat). Heartbeats travel in the same stream as output and
// are read in order behind it, so under a flooding task on a loaded machine
// they arrive late while the output never stops; without this the watchdog
// found such a node unreachable, then offline, and lost its tasks.
func (s *Session) heard(now time.Time, interval time.Duration) (store.Heartbeat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastBeat == nil || now.Sub(s.lastBeat.At) < interval {
		return store.Heartbeat{}, false
	}
	s.lastSeen = now
	hb := *s.lastBeat
	hb.At, hb.RunningTasks, hb.GPUsChanged, hb.GPUs = now, store.RunningUnknown, false, nil
	s.lastBeat.At = now
	return hb, true
}

// machine is the node's CPUs and memory as it last reported them (0:
// unmeasured).
func (s *Session) machine() (cores float64, memoryMB int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity.GetCpuCores(), s.capacity.GetMemoryMb()
}

func (s *Session) seen(c *podiumv1.Capacity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSeen = time.Now()
	if c != nil {
		s.capacity = c
	}
}

// tearingDown counts n more slots the node spends on attempts the control
// plane no longer holds there.
func (s *Session) tearingDown(n int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy += n
}

// running takes the node's own count of the attempts holding a slot from a
// heartbeat: the busy slots come down to what it runs beyond the tasks this
// session holds, never up (a heartbeat counted before an assignment arrived
// says less than the node will run).
func (s *Session) running(n int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = max(0, min(s.busy, n-int32(len(s.tasks))))
}

// charge books a task's cost against the session at once, so whoever reads the
// snapshot next sees the capacity gone rather than waiting for a heartbeat.
func (s *Session) charge(taskID string, c TaskCost) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[taskID] = c
	s.lastAssignedAt = time.Now()
}

// release gives a task's cost back and reports whether the session held it.
func (s *Session) release(taskID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tasks[taskID]
	delete(s.tasks, taskID)
	return ok
}

// Registry holds this replica's live sessions.
type Registry struct {
	mu       sync.Mutex
	sessions map[string]*Session
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{sessions: map[string]*Session{}} }

// Get returns the node's live session on this replica.
func (r *Registry) Get(nodeID string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[nodeID]
	return s, ok
}

func (r *Registry) put(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sessions[s.NodeID] = s
}

func (r *Registry) remove(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.NodeID] == s {
		delete(r.sessions, s.NodeID)
	}
}

// Len is how many sessions this replica holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// CloseAll ends every session. Graceful shutdown calls it so the stream
// handlers return before the HTTP server waits on them, and a lost lease calls
// it because this replica can no longer prove it holds any node.
func (r *Registry) CloseAll() {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.Close()
	}
}

// Snapshot returns every session's state.
func (r *Registry) Snapshot() []Snapshot {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	out := make([]Snapshot, len(all))
	for i, s := range all {
		out[i] = s.Snapshot()
	}
	return out
}

// SnapshotOf returns one node's state, if this replica holds its stream.
func (r *Registry) SnapshotOf(nodeID string) (Snapshot, bool) {
	s, ok := r.Get(nodeID)
	if !ok {
		return Snapshot{}, false
	}
	return s.Snapshot(), true
}

// Drain marks a node's live session draining (or not) and reports whether this
// replica holds one. The stored column is the durable half; this is the live one.
func (r *Registry) Drain(nodeID string, draining bool) bool {
	s, ok := r.Get(nodeID)
	if ok {
		s.mu.Lock()
		s.draining = draining
		s.mu.Unlock()
	}
	return ok
}

// SetLabels replaces a node's live labels and reports whether this replica
// holds its session. A node that is not connected needs nothing: its next
// stream reads the labels off its row.
func (r *Registry) SetLabels(nodeID string, labels []string) bool {
	s, ok := r.Get(nodeID)
	if ok {
		s.mu.Lock()
		s.labels = append([]string(nil), labels...)
		s.mu.Unlock()
	}
	return ok
}

// Release gives back the slot and resources whichever session holds taskID
// booked for it: on a terminal event, a revoked assignment or a write-off. A
// task no session holds is a no-op; replayed terminal events are routine.
func (r *Registry) Release(taskID string) {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		if s.release(taskID) {
			return
		}
	}
}

// Forget drops a task from a node's session without crediting anything back to
// the scheduler's view: it is what reconciliation does with a task the control
// plane no longer holds on that node.
func (r *Registry) Forget(nodeID, taskID string) {
	if s, ok := r.Get(nodeID); ok {
		s.release(taskID)
	}
}

// pushReplicas sends every session the list of replica addresses. A session
// whose queue is full goes without: it gets the list with its next HelloAck.
func (r *Registry) pushReplicas(addrs []string) {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		_ = s.trySend(replicasMessage(addrs))
	}
}

func replicasMessage(addrs []string) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Replicas{
		Replicas: &podiumv1.Replicas{Addresses: slices.Clone(addrs)}}}
}
