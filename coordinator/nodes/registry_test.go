package nodes

import (
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
