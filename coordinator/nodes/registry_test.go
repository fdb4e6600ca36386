package nodes

import (
	"errors"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestSessionSnapshotChargesAndReleases(t *testing.T) {
	r := NewRegistry()
	s := newSession("node_a", 1)
	s.configure([]string{"linux"}, false, 0)
	s.seen(&podiumv1.Capacity{CpuCores: 4, MemoryMb: 8192, MaxTasks: 3})
	r.put(s)

	s.charge("task_1", TaskCost{CPU: 1.5, MemoryMB: 1024})
	s.charge("task_2", TaskCost{CPU: 1, MemoryMB: 0})
	snap, ok := r.SnapshotOf("node_a")
	if !ok {
		t.Fatal("no snapshot for a registered session")
	}
	if snap.RunningTasks != 2 || snap.FreeSlots != 1 || snap.FreeCPU != 1.5 || snap.FreeMemoryMB != 7168 {
		t.Fatalf("after two charges: %+v", snap)
	}
	r.Release("task_1")
	r.Release("task_1") // a replayed terminal event is a no-op
	snap = s.Snapshot()
	if snap.RunningTasks != 1 || snap.FreeSlots != 2 || snap.FreeCPU != 3 || snap.FreeMemoryMB != 8192 {
		t.Fatalf("after release: %+v", snap)
	}
	if !r.Drain("node_a", true) || r.Drain("node_b", true) {
		t.Fatal("Drain reports the wrong sessions")
	}
	if snap = s.Snapshot(); snap.FreeSlots != 0 || !snap.Draining {
		t.Fatalf("draining node: %+v", snap)
	}
	r.SetLabels("node_a", []string{"gpu"})
	r.Forget("node_a", "task_2")
	snap = s.Snapshot()
	if len(snap.Labels) != 1 || snap.Labels[0] != "gpu" || snap.RunningTasks != 0 {
		t.Fatalf("after labels and forget: %+v", snap)
	}
	// Unmeasured capacity is no constraint and reports no free figure.
	u := newSession("node_u", 1)
	u.seen(&podiumv1.Capacity{MaxTasks: 1})
	u.charge("task_3", TaskCost{CPU: 8})
	if snap := u.Snapshot(); snap.FreeCPU != 0 || snap.FreeSlots != 0 {
		t.Fatalf("unmeasured node: %+v", snap)
	}
	r.CloseAll()
	select {
	case <-s.Done():
	default:
		t.Fatal("CloseAll left a session open")
	}
}

// A replaced session ending must not take its replacement out of the
// registry: the old stream's handler removes only itself.
func TestRegistryRemoveKeepsAReplacement(t *testing.T) {
	r := NewRegistry()
	old, replacement := newSession("node_a", 1), newSession("node_a", 2)
	r.put(old)
	r.put(replacement)
	r.remove(old)
	if s, ok := r.Get("node_a"); !ok || s != replacement {
		t.Fatalf("after the old session left: %v %v, want the replacement", s, ok)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d, want 1", r.Len())
	}
	r.remove(replacement)
	if _, ok := r.Get("node_a"); ok || r.Len() != 0 {
		t.Fatal("the replacement is still registered after it left")
	}
	if _, ok := r.SnapshotOf("node_a"); ok {
		t.Fatal("a snapshot of a node with no session")
	}
}

// A session's queue is bounded: trySend says so when it is full rather than
// wait, and nothing can be queued on a session that ended.
func TestSessionQueueIsBounded(t *testing.T) {
	s := newSession("node_a", 1)
	m := &podiumv1.StreamResponse{}
	n := 0
	for ; n < 1000; n++ {
		if err := s.trySend(m); err != nil {
			if !errors.Is(err, errBacklogged) {
				t.Fatalf("trySend on a full queue: %v, want errBacklogged", err)
			}
			break
		}
	}
	if n != maxQueued {
		t.Fatalf("queued %d messages before the queue was full, want %d", n, maxQueued)
	}
	s.Close()
	s.Close() // twice is fine
	if err := s.trySend(m); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("trySend after Close: %v, want ErrSessionClosed", err)
	}
	if err := s.send(m); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("send after Close: %v, want ErrSessionClosed", err)
	}
}

// The operator's slot override wins over the node's own number; draining
// leaves no free slot; a snapshot is a copy its reader can keep.
func TestSnapshotSlotsAndCopies(t *testing.T) {
	s := newSession("node_a", 1)
	s.seen(&podiumv1.Capacity{MaxTasks: 2})
	s.configure([]string{"linux"}, false, 5)
	s.charge("task_1", TaskCost{})
	snap := s.Snapshot()
	if snap.FreeSlots != 4 {
		t.Fatalf("free slots %d with an override of 5 and one task, want 4", snap.FreeSlots)
	}
	snap.Labels[0] = "changed"
	snap.Capacity.MaxTasks = 99
	if again := s.Snapshot(); again.Labels[0] != "linux" || again.Capacity.MaxTasks != 2 {
		t.Fatalf("changing a snapshot changed the session: %+v", again)
	}
	s.configure([]string{"linux"}, true, 5)
	if snap := s.Snapshot(); snap.FreeSlots != 0 || !snap.Draining {
		t.Fatalf("draining session: %+v", snap)
	}
	// A heartbeat without capacity keeps the last one the node sent.
	s.seen(nil)
	if snap := s.Snapshot(); snap.Capacity.GetMaxTasks() != 2 {
		t.Fatalf("capacity after a heartbeat without one: %v", snap.Capacity)
	}
}

// The queue hands messages to the stream's writer in the order they were
// queued, and holds no buffer once it is empty: an idle node costs its
// session no queue.
func TestSessionQueueOrderAndIdleCost(t *testing.T) {
	s := newSession("node_a", 1)
	if s.out.queue != nil {
		t.Fatal("a new session's queue holds a buffer before anything was queued")
	}
	var sent []*podiumv1.StreamResponse
	for range 3 {
		m := &podiumv1.StreamResponse{}
		sent = append(sent, m)
		if err := s.trySend(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range sent {
		got, ok := s.out.pop()
		if !ok || got != want {
			t.Fatalf("message %d out of order or missing (ok %v)", i, ok)
		}
	}
	if _, ok := s.out.pop(); ok {
		t.Fatal("pop from an empty queue returned a message")
	}
	if s.out.queue != nil {
		t.Fatalf("an emptied queue keeps its buffer (capacity %d)", cap(s.out.queue))
	}
}

// send waits for room in a full queue: it queues once the writer takes a
// message, and ends the session when the writer takes none for sendWait,
// because a node that cannot take maxQueued messages is not reading.
func TestSessionSendOnAFullQueue(t *testing.T) {
	s := newSession("node_a", 1)
	for range maxQueued {
		if err := s.trySend(&podiumv1.StreamResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	last := &podiumv1.StreamResponse{}
	queued := make(chan error, 1)
	go func() { queued <- s.send(last) }()
	if _, ok := s.out.pop(); !ok {
		t.Fatal("a full queue gave nothing")
	}
	if err := <-queued; err != nil {
		t.Fatalf("send once there was room: %v", err)
	}
	if n := s.out.len(); n != maxQueued {
		t.Fatalf("%d queued after the wait, want %d", n, maxQueued)
	}

	s.sendWait = 10 * time.Millisecond
	if err := s.send(&podiumv1.StreamResponse{}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("send to a node that reads nothing: %v, want ErrSessionClosed", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("a node that took nothing for sendWait still has its session")
	}
}
