package store

import (
	"strings"
	"testing"
	"time"
)

func TestPlaceChoosesMostFreeSlotsThenOldestAssignmentThenLowestID(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cands := []*Candidate{
		{ID: "node_c", SlotLimit: 4, Running: 2, LastAssignedAt: t0},                      // 2 free
		{ID: "node_b", SlotLimit: 4, Running: 1, LastAssignedAt: t0.Add(time.Second)},     // 3 free, newer
		{ID: "node_a", SlotLimit: 5, Running: 2, LastAssignedAt: t0.Add(time.Second)},     // 3 free, newer, lower id
		{ID: "node_d", SlotLimit: 3, Running: 0, LastAssignedAt: t0.Add(2 * time.Second)}, // 3 free, newest
	}
	i, why := Place(Need{}, cands)
	if i < 0 || cands[i].ID != "node_a" {
		t.Fatalf("placed on %v (%s), want node_a: most free slots, then assigned longest ago, then lowest id", i, why)
	}
	cands[2].LastAssignedAt = t0.Add(3 * time.Second)
	if i, _ := Place(Need{}, cands); cands[i].ID != "node_b" {
		t.Fatalf("placed on %s, want node_b (assigned longest ago among the freest)", cands[i].ID)
	}
}

func TestPlaceReasonsInOrder(t *testing.T) {
	cases := []struct {
		name  string
		need  Need
		cands []*Candidate
		want  string
	}{
		{"nobody", Need{}, nil, "no node is connected"},
		{"labels", Need{Labels: []string{"gpu", "ssd"}}, []*Candidate{{ID: "n", Labels: []string{"gpu"}, SlotLimit: 1}}, "label the task needs (gpu, ssd)"},
		{"draining", Need{Labels: []string{"gpu"}}, []*Candidate{{ID: "n", Labels: []string{"gpu"}, SlotLimit: 1, Draining: true}}, "draining"},
		{"cpu", Need{CPU: 3}, []*Candidate{{ID: "n", SlotLimit: 1, CPUCores: 4, CommittedCPU: 2}}, "free CPU and memory the task needs (3 CPU"},
		{"memory", Need{MemoryMB: 512}, []*Candidate{{ID: "n", SlotLimit: 1, MemoryMB: 1024, CommittedMemMB: 600}}, "512 MB"},
		{"full", Need{}, []*Candidate{{ID: "n", SlotLimit: 1, Running: 1}}, "busy"},
	}
	for _, c := range cases {
		i, why := Place(c.need, c.cands)
		if i >= 0 || !strings.Contains(why, c.want) {
			t.Errorf("%s: got %d %q, want no placement and a reason with %q", c.name, i, why, c.want)
		}
	}
	// Unmeasured capacity (0) is no constraint.
	if i, why := Place(Need{CPU: 64, MemoryMB: 1 << 20}, []*Candidate{{ID: "n", SlotLimit: 1}}); i != 0 {
		t.Fatalf("an unmeasured node refused a task: %s", why)
	}
}
