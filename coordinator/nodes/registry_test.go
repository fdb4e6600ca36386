package nodes

import (
	"errors"
	"testing"

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
	if n != cap(s.out) {
		t.Fatalf("queued %d messages before the queue was full, want %d", n, cap(s.out))
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
