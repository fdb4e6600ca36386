package placement_test

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/placement"
)

// absent is an enrolled node that is not connected now.
func absent(c *placement.Candidate) { c.Absent = true }

// A task no node of the fleet could run even empty is unschedulable, and
// its reason says what no node offers and what to change; one that some
// node could run waits, whatever keeps that node from taking it now, and is
// never called unschedulable.
func TestUnschedulableIsNotWaiting(t *testing.T) {
	t.Parallel()
	// A fleet of 24 GB machines: 8 cores and 23,456 MiB each, each
	// changed the same way.
	fleet := func(change ...func(*placement.Candidate)) []*placement.Candidate {
		each := append([]func(*placement.Candidate){cpu(8, 0), mem(23456, 0)}, change...)
		return []*placement.Candidate{node("a", each...), node("b", each...)}
	}
	cases := []struct {
		name    string
		need    placement.Need
		cands   []*placement.Candidate
		unsched bool
		// why is the reason's start when unschedulable, else a part of it;
		// not, when set, must be in no part of it.
		why, not string
	}{
		// Never: what every node is, not what it is doing.
		{name: "memory beyond every node's whole memory",
			need: placement.Need{MemoryMB: 900000}, cands: fleet(), unsched: true, not: "0 CPU",
			why: "cannot run on any node: it asks 900,000 MiB of memory (its sidecars' included) and the largest node has 23,456 MiB; " +
				"lower resources.memory_mb or enroll a bigger node"},
		{name: "CPU beyond every node's cores",
			need: placement.Need{CPU: 32, MemoryMB: 512}, cands: fleet(), unsched: true,
			why: "cannot run on any node: it asks 32 CPU (its sidecars' included) and the largest node has 8 CPU; lower resources.cpu or enroll a bigger node"},
		{name: "CPU on one node and memory on another, never both",
			need:  placement.Need{CPU: 16, MemoryMB: 32 * gib},
			cands: []*placement.Candidate{node("a", cpu(32, 0), mem(16*gib, 0)), node("b", cpu(8, 0), mem(64*gib, 0))}, unsched: true,
			why: "cannot run on any node: it asks 16 CPU and 32 GiB of memory (its sidecars' included) and no node has both"},
		{name: "memory beyond every node's limit on one task",
			need:  placement.Need{MemoryMB: 8 * gib},
			cands: fleet(limits(placement.Limits{MaxMemoryMB: 4 * gib})), unsched: true,
			why: "cannot run on any node: no node allows 8 GiB of memory for one task (largest: 4 GiB)"},
		{name: "a label no node has",
			need: placement.Need{Labels: []string{"gpu"}}, cands: fleet(), unsched: true,
			why: "cannot run on any node: no node has every label the task needs (gpu)"},
		{name: "egress no node permits",
			need: placement.Need{AllowEgress: egress("10.0.0.0/8")}, cands: fleet(permit("10.1.0.0/16")), unsched: true,
			why: "cannot run on any node: no node permits egress to 10.0.0.0/8"},
		{name: "privileged sidecars no node allows",
			need: placement.Need{PrivilegedSidecars: true}, cands: fleet(), unsched: true,
			why: "cannot run on any node: no node allows privileged sidecars"},
		{name: "a GPU where no node has one",
			need: placement.Need{GPUs: 1}, cands: fleet(), unsched: true,
			why: "cannot run on any node: no node has a GPU; loosen gpu_model or gpu_memory_mb, or enroll a node with such GPUs"},
		{name: "a GPU model no node has",
			need: placement.Need{GPUs: 1, GPUModel: "NVIDIA H100*"}, cands: fleet(gpus(0, a100)), unsched: true,
			why: `cannot run on any node: no node has a GPU matching "NVIDIA H100*"`},
		{name: "GPU memory no node's GPUs have",
			need: placement.Need{GPUs: 1, GPUMemoryMB: 80000}, cands: fleet(gpus(0, a100)), unsched: true,
			why: "cannot run on any node: no node has a GPU with at least 80000 MiB"},
		{name: "more GPUs than any node has",
			need: placement.Need{GPUs: 4}, cands: fleet(gpus(0, t4, t4)), unsched: true,
			why: "cannot run on any node: it asks for 4 GPUs and the most a node has is 2; ask for fewer, or enroll a node with more"},
		{name: "the reason names the labelled nodes, and their limits",
			need:    placement.Need{Labels: []string{"ssd"}, MemoryMB: 32 * gib},
			cands:   []*placement.Candidate{node("a", labels("ssd"), mem(16*gib, 0)), node("b", labels("ssd"), mem(64*gib, 0), limits(placement.Limits{MaxMemoryMB: 8 * gib})), node("c", mem(64*gib, 0))},
			unsched: true,
			why:     "cannot run on any node: it asks 32 GiB of memory (its sidecars' included) and the largest node with the labels the task needs and limits that allow it has 16 GiB"},
		{name: "an absent node that could not run it either",
			need: placement.Need{MemoryMB: 64 * gib}, cands: fleet(absent), unsched: true, why: "cannot run on any node: it asks 64 GiB of memory"},
		{name: "only absent nodes, none of which could",
			need: placement.Need{Labels: []string{"gpu"}}, cands: []*placement.Candidate{node("a", absent)}, unsched: true,
			why: "cannot run on any node: no node has every label the task needs (gpu)"},

		// Waiting: some node could run it, later.
		{name: "memory taken by running tasks", need: placement.Need{MemoryMB: 16 * gib},
			cands: fleet(mem(23456, 10000)), why: "waiting: no node has 16 GiB free now", not: "0 CPU"},
		{name: "CPU taken by running tasks", need: placement.Need{CPU: 6},
			cands: []*placement.Candidate{node("a", cpu(8, 4)), node("b", cpu(8, 3))}, why: "waiting: no node has 6 CPU free now", not: "MiB"},
		{name: "every slot held", need: placement.Need{MemoryMB: 512},
			cands: []*placement.Candidate{node("a", slots(1, 1), mem(23456, 0))}, why: placement.Busy},
		{name: "the one node that could is draining", need: placement.Need{MemoryMB: 16 * gib},
			cands: []*placement.Candidate{node("a", mem(23456, 0), draining), node("b", mem(8*gib, 0))}, why: "every node that could run the task is draining"},
		{name: "the one node that could has its engine down", need: placement.Need{Labels: []string{"gpu"}},
			cands: []*placement.Candidate{node("a", labels("gpu"), engineDown(t0))}, why: "Docker engine that does not answer (node a:"},
		{name: "the one node that could is below its disk floor", need: placement.Need{},
			cands: []*placement.Candidate{node("a", diskLow(t0))}, why: "below its data disk's free-space floor (node a:"},
		{name: "its GPUs held by running tasks", need: placement.Need{GPUs: 2},
			cands: []*placement.Candidate{node("a", gpus(1, t4, t4))}, why: "no connected node has 2 free GPUs (largest: 1)"},
		{name: "only an absent node could, so it waits for that node", need: placement.Need{Labels: []string{"gpu"}},
			cands: []*placement.Candidate{node("a"), node("g", labels("gpu"), absent)},
			why:   "no connected node could run it, but node g, which is not connected now, could: it waits for such a node to come back"},
		{name: "an absent big node counts for the fleet's size", need: placement.Need{MemoryMB: 64 * gib},
			cands: []*placement.Candidate{node("a", mem(23456, 0)), node("big", mem(128*gib, 0), absent)}, why: "node big, which is not connected now, could"},
		{name: "only absent nodes, one of which could", need: placement.Need{},
			cands: []*placement.Candidate{node("a", absent)}, why: "no node is connected"},
		{name: "no node enrolled at all", need: placement.Need{MemoryMB: 900000}, why: "no node is connected"},
		{name: "an absent node is never named for what connected ones do",
			need:  placement.Need{},
			cands: []*placement.Candidate{node("x", absent, engineDown(t0.Add(-1))), node("a", engineDown(t0))}, why: "(node a:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			i, r := placement.Place(c.need, c.cands)
			if i >= 0 {
				t.Fatalf("placed on %s, want none", c.cands[i].ID)
			}
			if r.Unschedulable != c.unsched {
				t.Fatalf("unschedulable %v (%q), want %v", r.Unschedulable, r.Text, c.unsched)
			}
			if c.unsched && !strings.HasPrefix(r.Text, c.why) || !c.unsched && !strings.Contains(r.Text, c.why) {
				t.Errorf("reason %q, want one with %q", r.Text, c.why)
			}
			if !c.unsched && strings.Contains(r.Text, "cannot run on any node") {
				t.Errorf("a task that waits is told %q", r.Text)
			}
			if c.not != "" && strings.Contains(r.Text, c.not) {
				t.Errorf("reason %q says %q", r.Text, c.not)
			}
		})
	}
}

// An absent node is never placed on, however roomy, and a connected one
// that could run the task is: an absent one makes no task wait that a
// connected one could take.
func TestPlaceNeverChoosesAnAbsentNode(t *testing.T) {
	t.Parallel()
	cands := []*placement.Candidate{node("a", absent, slots(64, 0)), node("b", slots(4, 3))}
	if i, r := placement.Place(placement.Need{}, cands); i != 1 {
		t.Fatalf("Place = %d (%+v), want the connected node b", i, r)
	}
	cands[1].Running = 4
	if i, r := placement.Place(placement.Need{}, cands); i >= 0 || r.Text != placement.Busy {
		t.Fatalf("Place = %d (%+v), want it to wait for a slot on b", i, r)
	}
}
