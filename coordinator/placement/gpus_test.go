package placement_test

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/placement"
)

func gpus(committed int32, g ...placement.GPU) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.GPUs, c.CommittedGPUs = g, committed }
}

var (
	h100 = placement.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}
	a100 = placement.GPU{Model: "NVIDIA A100-SXM4-40GB", MemoryMB: 40960}
	t4   = placement.GPU{Model: "Tesla T4", MemoryMB: 15360}
)

// A task asking for GPUs goes only where as many matching GPUs are free,
// and one that waits says what it lacks.
func TestPlaceGPUs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		need      placement.Need
		cands     []*placement.Candidate
		want, why string
		unsched   bool
	}{
		{name: "a task without GPUs goes to a node without GPUs",
			need: placement.Need{}, cands: []*placement.Candidate{node("a")}, want: "a"},
		{name: "a GPU task skips the node without GPUs",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a"), node("b", gpus(0, t4))}, want: "b"},
		{name: "no node has a GPU",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a"), node("b")}, unsched: true,
			why: "cannot run on any node: no node has a GPU; loosen gpu_model or gpu_memory_mb, or enroll a node with such GPUs"},
		{name: "the one GPU is held",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a", gpus(1, t4))}, why: "no connected node has 1 free GPU (largest: 0)"},
		{name: "two asked, one free at most",
			need:  placement.Need{GPUs: 2},
			cands: []*placement.Candidate{node("a", gpus(1, t4, t4)), node("b", gpus(0, t4))},
			why:   "no connected node has 2 free GPUs (largest: 1)"},
		{name: "two asked, two free on the second",
			need:  placement.Need{GPUs: 2},
			cands: []*placement.Candidate{node("a", gpus(1, t4, t4)), node("b", gpus(0, a100, a100))}, want: "b"},
		{name: "the model filters",
			need:  placement.Need{GPUs: 1, GPUModel: "NVIDIA H100*"},
			cands: []*placement.Candidate{node("a", gpus(0, a100, t4)), node("b", gpus(0, t4, h100))}, want: "b"},
		{name: "no GPU of the model",
			need:  placement.Need{GPUs: 1, GPUModel: "NVIDIA H100*"},
			cands: []*placement.Candidate{node("a", gpus(0, a100, t4))}, unsched: true, why: `cannot run on any node: no node has a GPU matching "NVIDIA H100*"`},
		{name: "the memory filters",
			need:  placement.Need{GPUs: 1, GPUMemoryMB: 40960},
			cands: []*placement.Candidate{node("a", gpus(0, t4)), node("b", gpus(0, a100))}, want: "b"},
		{name: "no GPU of the model with the memory",
			need:    placement.Need{GPUs: 1, GPUModel: "NVIDIA H100*", GPUMemoryMB: 81920},
			cands:   []*placement.Candidate{node("a", gpus(0, h100, a100))},
			unsched: true, why: `cannot run on any node: no node has a GPU matching "NVIDIA H100*" with at least 81920 MiB`},
		{name: "matching GPUs held by other tasks count as taken",
			need:  placement.Need{GPUs: 2, GPUModel: "*A100*"},
			cands: []*placement.Candidate{node("a", gpus(1, a100, a100, t4))},
			why:   `no connected node has 2 free GPUs matching "*A100*" (largest: 1)`},
		{name: "labels still come first",
			need:  placement.Need{GPUs: 1, Labels: []string{"zone=eu"}},
			cands: []*placement.Candidate{node("a", gpus(0, t4))}, unsched: true, why: "every label the task needs"},
		{name: "a draining GPU node takes nothing",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a", gpus(0, t4), draining)}, why: "draining"},
		{name: "free GPUs but no free slot",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a", gpus(0, t4), slots(1, 1))}, why: "busy: it waits for a free slot"},
		{name: "of two GPU nodes the one with more free slots",
			need:  placement.Need{GPUs: 1},
			cands: []*placement.Candidate{node("a", gpus(0, t4), slots(4, 3)), node("b", gpus(0, t4), slots(4, 1))}, want: "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i, why := placement.Place(tc.need, tc.cands)
			got := ""
			if i >= 0 {
				got = tc.cands[i].ID
			}
			if got != tc.want {
				t.Fatalf("Place = %q (%+v), want %q", got, why, tc.want)
			}
			if tc.want == "" && (!strings.Contains(why.Text, tc.why) || why.Unschedulable != tc.unsched) {
				t.Errorf("reason = %+v, want it to contain %q, unschedulable %v", why, tc.why, tc.unsched)
			}
		})
	}
}

// Charging a placement books its GPUs, so one pass never gives a node's one
// GPU to two tasks.
func TestChargeBooksGPUs(t *testing.T) {
	t.Parallel()
	fleet := []*placement.Candidate{node("a", gpus(0, t4))}
	need := placement.Need{GPUs: 1}
	i, why := placement.Place(need, fleet)
	if i != 0 {
		t.Fatalf("first task: Place = %d (%+v), want the node", i, why)
	}
	fleet[i].Charge(need, t0)
	if i, why := placement.Place(need, fleet); i != -1 || why != (placement.Reason{Text: "no connected node has 1 free GPU (largest: 0)"}) {
		t.Errorf("second task: Place = %d (%+v), want it to wait for the GPU", i, why)
	}
	// A task without GPUs still fits beside it.
	if i, _ := placement.Place(placement.Need{}, fleet); i != 0 {
		t.Errorf("a task without GPUs: Place = %d, want the node", i)
	}
}
