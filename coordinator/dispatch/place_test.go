package dispatch_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
)

// What the store read of a node and of a claimed task is what placement
// rules on: the node's room, bounds, egress ranges (parsed) and GPUs, and
// the task's need, its allow_egress parsed as placement matches it.
func TestFleetAndNeedAreWhatPlacementReads(t *testing.T) {
	low := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := []store.Candidate{
		{ID: "node_low", SlotLimit: 4, DiskLowSince: low},
		{ID: "node_a", Labels: []string{"gpu"}, SlotLimit: 4, Running: 1, CPUCores: 8, MemoryMB: 16384, CommittedCPU: 1,
			CommittedMemMB: 1024, Limits: store.NodeLimits{MaxCPU: 4, MaxMemoryMB: 8192, MaxPids: 512, MaxTimeoutSeconds: 3600,
				MaxOutputBytes: 1 << 30, PermitEgress: []string{"10.0.0.0/8"}, AllowPrivilegedSidecars: true},
			GPUs: []store.NodeGPU{{Index: 0, UUID: "GPU-1", Model: "Tesla T4", MemoryMB: 15360}}},
	}
	fleet := dispatch.Fleet(nodes)
	a := fleet[1]
	if a.ID != "node_a" || !slices.Equal(a.Labels, []string{"gpu"}) || a.SlotLimit != 4 || a.Running != 1 || a.CPUCores != 8 ||
		a.MemoryMB != 16384 || a.CommittedCPU != 1 || a.CommittedMemMB != 1024 || a.Limits.MaxPids != 512 ||
		!slices.Equal(a.Limits.PermitEgress, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) || !a.Limits.AllowPrivilegedSidecars ||
		!slices.Equal(a.GPUs, []placement.GPU{{Model: "Tesla T4", MemoryMB: 15360}}) {
		t.Fatalf("node_a is %+v in placement's terms", a)
	}
	if fleet[0].FreeSlots() != 0 {
		t.Fatalf("node_low, below its disk floor, has %d free slots, want none", fleet[0].FreeSlots())
	}

	place := dispatch.PlaceOn(fleet, low)
	task := store.Claimed{ID: "task_a", Need: store.Need{Labels: []string{"gpu"}, CPU: 2, MemoryMB: 2048, Pids: 100,
		AllowEgress: []string{"10.1.0.0/16"}, PrivilegedSidecars: true, GPUs: 1, GPUModel: "Tesla*"}}
	if v := place(task); v.NodeID != "node_a" {
		t.Fatalf("task_a went to %+v, want node_a", v)
	}
	if a.Running != 2 || a.CommittedCPU != 3 || a.CommittedMemMB != 3072 || a.CommittedGPUs != 1 {
		t.Fatalf("node_a after task_a: %+v, want it charged one slot, 2 CPU, 2048 MB and a GPU", a)
	}
	// An egress range outside what the node permits is refused, and so is
	// one that does not parse (the zero Prefix).
	for _, egress := range []string{"192.168.0.0/16", "not a range"} {
		task.Need = store.Need{AllowEgress: []string{egress}}
		if v := place(task); v.NodeID != "" || !v.Unschedulable || !strings.HasPrefix(v.Why, placement.Unschedulable) {
			t.Fatalf("a task asking egress to %q went to %+v, want it unschedulable, with a reason", egress, v)
		}
	}
}

// A task that finds every node busy waits for a free slot; while other
// sharers' tasks were claimed with it, it waits for its fair share, and is
// told its sharer's counts.
func TestPlaceOnWordsTheFairShareWait(t *testing.T) {
	place := dispatch.PlaceOn(dispatch.Fleet([]store.Candidate{{ID: "node_a", SlotLimit: 1, Running: 1}}), time.Now())
	task := store.Claimed{ID: "task_a", Sharer: "group ml", Running: 1234, Queued: 5}
	if v := place(task); v != (store.Verdict{Why: placement.Busy}) {
		t.Fatalf("uncontended, the task waits with %+v, want %q", v, placement.Busy)
	}
	task.Contended = true
	if v := place(task); v != (store.Verdict{Why: placement.FairShareReason("group ml", 1234, 5)}) {
		t.Fatalf("contended, the task waits with %+v", v)
	}
}

// A node the store read as absent is never given a task, however roomy,
// and counts for whether a task could ever run: a task only it could run
// waits for it, and one no node could run is unschedulable.
func TestPlaceOnCountsAbsentNodesForTheFleetOnly(t *testing.T) {
	fleet := dispatch.Fleet([]store.Candidate{
		{ID: "node_a", SlotLimit: 4, CPUCores: 8, MemoryMB: 16384},
		{ID: "node_big", SlotLimit: 64, CPUCores: 128, MemoryMB: 1 << 20, Absent: true},
	})
	if !fleet[1].Absent {
		t.Fatal("Fleet dropped node_big's Absent")
	}
	place := dispatch.PlaceOn(fleet, time.Now())
	if v := place(store.Claimed{ID: "task_small", Need: store.Need{CPU: 1}}); v.NodeID != "node_a" {
		t.Fatalf("a small task went to %+v, want node_a, the connected one", v)
	}
	if v := place(store.Claimed{ID: "task_big", Need: store.Need{MemoryMB: 64 << 10}}); v.NodeID != "" || v.Unschedulable ||
		!strings.Contains(v.Why, "node node_big, which is not connected now, could") {
		t.Fatalf("a task only the absent node could run: %+v, want it waiting for node_big", v)
	}
	if v := place(store.Claimed{ID: "task_huge", Need: store.Need{MemoryMB: 4 << 20}}); !v.Unschedulable ||
		!strings.HasPrefix(v.Why, "cannot run on any node: it asks 4096 GiB of memory") {
		t.Fatalf("a task no node could run: %+v, want it unschedulable", v)
	}
	if fleet[1].Running != 0 {
		t.Fatalf("the absent node was charged %d tasks", fleet[1].Running)
	}
}
