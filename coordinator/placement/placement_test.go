package placement_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/placement"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var t0 = time.Unix(1_700_000_000, 0)

// tenth and fifth are variables so that their sum is computed in float64 at
// run time (0.30000000000000004), as committed CPU is, not exactly by the
// compiler.
var tenth, fifth = 0.1, 0.2

// node is a connected, undrained candidate with slots free and unmeasured
// CPU and memory; each case changes what it is about.
func node(id string, change ...func(*placement.Candidate)) *placement.Candidate {
	c := &placement.Candidate{ID: id, SlotLimit: 4}
	for _, f := range change {
		f(c)
	}
	return c
}

func labels(l ...string) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.Labels = l }
}

func slots(limit, running int32) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.SlotLimit, c.Running = limit, running }
}

func cpu(cores, committed float64) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.CPUCores, c.CommittedCPU = cores, committed }
}

func mem(mb, committed int64) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.MemoryMB, c.CommittedMemMB = mb, committed }
}

func assigned(at time.Time) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.LastAssignedAt = at }
}

func draining(c *placement.Candidate) { c.Draining = true }

// diskLow has the node's data disk below its floor (1024 MiB, 3 free) since at.
func diskLow(at time.Time) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.DiskFreeMB, c.MinFreeDiskMB, c.DiskLowSince = 3, 1024, at }
}

// engineDown has the node's Docker engine not answering since at.
func engineDown(at time.Time) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.EngineDownSince = at }
}

func limits(l placement.Limits) func(*placement.Candidate) {
	return func(c *placement.Candidate) { c.Limits = l }
}

func permit(cidrs ...string) func(*placement.Candidate) {
	return func(c *placement.Candidate) {
		for _, s := range cidrs {
			c.Limits.PermitEgress = append(c.Limits.PermitEgress, netip.MustParsePrefix(s))
		}
	}
}

func egress(cidrs ...string) []netip.Prefix { return placement.ParseEgress(cidrs) }

// privileged is a node whose agent runs with --allow-privileged-sidecars.
func privileged(c *placement.Candidate) { c.Limits.AllowPrivilegedSidecars = true }

const gib = 1024 // MiB

func TestPlace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		need  placement.Need
		cands []*placement.Candidate
		// want is the id of the chosen node, or "" for none with a reason
		// containing why, unschedulable or not as unsched says.
		want, why string
		unsched   bool
	}{
		// Labels.
		{name: "a task without labels goes anywhere",
			cands: []*placement.Candidate{node("a", labels("gpu"))}, want: "a"},
		{name: "only a node with every label the task needs",
			need:  placement.Need{Labels: []string{"gpu", "ssd"}},
			cands: []*placement.Candidate{node("a", labels("gpu")), node("b", labels("ssd")), node("c", labels("ssd", "x86", "gpu"), slots(4, 3))},
			want:  "c"},
		{name: "no node has the labels, and the reason names them",
			need:  placement.Need{Labels: []string{"gpu", "ssd"}},
			cands: []*placement.Candidate{node("a", labels("gpu"))}, unsched: true,
			why: "cannot run on any node: no node has every label the task needs (gpu, ssd); label a node (podium node label NODE --add LABEL)"},

		// The data disk's free-space floor.
		{name: "a node below its disk's free-space floor takes nothing, even with the most free slots",
			cands: []*placement.Candidate{node("a", diskLow(t0), slots(8, 0)), node("b", slots(4, 3))}, want: "b"},
		{name: "a node below its floor: the reason names it, what it has free, its floor and since when",
			cands: []*placement.Candidate{node("a", diskLow(t0))},
			why: "every undrained node that could run the task is below its data disk's free-space floor (node a: 3 MiB free, floor 1024 MiB, since " +
				t0.UTC().Format(time.RFC3339) + "; podium-agent --min-free-disk-mb): it waits for room"},
		{name: "every labelled node below its floor: the reason names the one below longest",
			need: placement.Need{Labels: []string{"ssd"}},
			cands: []*placement.Candidate{node("a", labels("ssd"), diskLow(t0.Add(time.Minute))), node("b", labels("ssd"), diskLow(t0)),
				node("c")},
			why: "every undrained node that could run the task is below its data disk's free-space floor (node b:"},
		{name: "with one node draining and the other below its floor, the reason is the floor",
			cands: []*placement.Candidate{node("a", draining), node("b", diskLow(t0))},
			why:   "every undrained node that could run the task is below its data disk's free-space floor (node b:"},

		// A Docker engine that does not answer.
		{name: "a node whose engine does not answer takes nothing, even with the most free slots",
			cands: []*placement.Candidate{node("a", engineDown(t0), slots(8, 0)), node("b", slots(4, 3))}, want: "b"},
		{name: "a node whose engine does not answer: the reason names it and since when",
			cands: []*placement.Candidate{node("a", engineDown(t0))},
			why: "every undrained node that could run the task has a Docker engine that does not answer (node a: its Docker engine has not answered since " +
				t0.UTC().Format(time.RFC3339) + "; systemctl status docker on the node): it waits for an engine"},
		{name: "every labelled node's engine down: the reason names the one down longest",
			need: placement.Need{Labels: []string{"ssd"}},
			cands: []*placement.Candidate{node("a", labels("ssd"), engineDown(t0.Add(time.Minute))), node("b", labels("ssd"), engineDown(t0)),
				node("c")},
			why: "every undrained node that could run the task has a Docker engine that does not answer (node b:"},
		{name: "an engine down comes before a full disk, which names a node whose engine answers",
			cands: []*placement.Candidate{node("a", engineDown(t0), diskLow(t0)), node("b", diskLow(t0.Add(time.Minute)))},
			why:   "every undrained node that could run the task is below its data disk's free-space floor (node b:"},
		{name: "with one node's engine down and the other below its floor, the reason is the floor",
			cands: []*placement.Candidate{node("a", engineDown(t0)), node("b", diskLow(t0))},
			why:   "every undrained node that could run the task is below its data disk's free-space floor (node b:"},
		{name: "with every node's engine down, the reason is the engine even where a disk is low too",
			cands: []*placement.Candidate{node("a", engineDown(t0), diskLow(t0))},
			why:   "every undrained node that could run the task has a Docker engine that does not answer (node a:"},

		// CPU and memory.
		{name: "free CPU is what is left after what the node is committed to",
			need:  placement.Need{CPU: 2},
			cands: []*placement.Candidate{node("a", cpu(4, 2.5)), node("b", cpu(4, 2), slots(4, 3))}, want: "b"},
		{name: "free memory is what is left after what the node is committed to",
			need:  placement.Need{MemoryMB: 512},
			cands: []*placement.Candidate{node("a", mem(1024, 600)), node("b", mem(1024, 512), slots(4, 3))}, want: "b"},
		{name: "a need that fills the node exactly fits, float sums included",
			need:  placement.Need{CPU: 0.3, MemoryMB: 300},
			cands: []*placement.Candidate{node("a", cpu(0.6, tenth+fifth), mem(300, 0))}, want: "a"},
		{name: "unmeasured CPU and memory are no constraint",
			need:  placement.Need{CPU: 64, MemoryMB: 1 << 20},
			cands: []*placement.Candidate{node("a")}, want: "a"},
		{name: "too little CPU free, and the reason says how much was asked and nothing of memory",
			need:  placement.Need{CPU: 3},
			cands: []*placement.Candidate{node("a", cpu(4, 2))},
			why:   "waiting: no node has 3 CPU free now (its sidecars' included): it runs when running tasks end and free the room"},
		{name: "too little memory free, and the reason says nothing of CPU",
			need:  placement.Need{MemoryMB: 512},
			cands: []*placement.Candidate{node("a", mem(1024, 600))}, why: "waiting: no node has 512 MiB free now ("},
		{name: "too little of both free",
			need:  placement.Need{CPU: 2, MemoryMB: 2 * gib},
			cands: []*placement.Candidate{node("a", cpu(4, 3), mem(4*gib, 3*gib))}, why: "waiting: no node has 2 CPU and 2 GiB free now"},

		// A node's limits on one task (podium-agent --max-*). Each case has
		// a node with room that refuses, and one that allows.
		{name: "memory above a node's maximum goes to a node that allows it",
			need:  placement.Need{MemoryMB: 8 * gib},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxMemoryMB: 4 * gib})), node("b", limits(placement.Limits{MaxMemoryMB: 8 * gib}), slots(4, 3))},
			want:  "b"},
		{name: "memory above every node's maximum waits, naming the largest",
			need:    placement.Need{MemoryMB: 8 * gib},
			cands:   []*placement.Candidate{node("a", mem(64*gib, 0), limits(placement.Limits{MaxMemoryMB: 4 * gib})), node("b", limits(placement.Limits{MaxMemoryMB: 2 * gib}))},
			unsched: true, why: "cannot run on any node: no node allows 8 GiB of memory for one task (largest: 4 GiB)"},
		{name: "memory is compared with the sidecars' added (a node's maximum is per task)",
			need:    placement.Need{MemoryMB: 1536},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxMemoryMB: 1 * gib}))},
			unsched: true, why: "allows 1536 MiB of memory for one task (largest: 1 GiB)"},
		{name: "CPU above a node's maximum",
			need:  placement.Need{CPU: 8},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxCPU: 4})), node("b", limits(placement.Limits{MaxCPU: 8}), slots(4, 3))},
			want:  "b"},
		{name: "CPU above every node's maximum waits",
			need:    placement.Need{CPU: 8},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxCPU: 4})), node("b", limits(placement.Limits{MaxCPU: 2.5}))},
			unsched: true, why: "cannot run on any node: no node allows 8 CPU for one task (largest: 4 CPU)"},
		{name: "CPU exactly at the maximum fits, float sums included",
			need:  placement.Need{CPU: tenth + fifth},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxCPU: 0.3}))}, want: "a"},
		{name: "pids above a node's maximum",
			need:  placement.Need{Pids: 10000},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxPids: 4096})), node("b", limits(placement.Limits{MaxPids: 10000}), slots(4, 3))},
			want:  "b"},
		{name: "pids above every node's maximum waits",
			need:    placement.Need{Pids: 10000},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxPids: 4096}))},
			unsched: true, why: "cannot run on any node: no node allows 10000 processes for one task (largest: 4096)"},
		{name: "a timeout above a node's maximum",
			need:  placement.Need{TimeoutSeconds: 7200},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxTimeoutSeconds: 3600})), node("b", limits(placement.Limits{MaxTimeoutSeconds: 86400}), slots(4, 3))},
			want:  "b"},
		{name: "a timeout above every node's maximum waits",
			need:    placement.Need{TimeoutSeconds: 7200},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxTimeoutSeconds: 3600}))},
			unsched: true, why: "cannot run on any node: no node allows a timeout of 2h0m0s for one task (largest: 1h0m0s)"},
		{name: "no timeout runs under the node's default, so any node allows it",
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxTimeoutSeconds: 60, MaxMemoryMB: 1, MaxCPU: 0.1, MaxPids: 1, MaxOutputBytes: 1}))},
			want:  "a"},
		{name: "an output limit above a node's maximum",
			need:  placement.Need{OutputLimitBytes: 4 << 30},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxOutputBytes: 1 << 30})), node("b", limits(placement.Limits{MaxOutputBytes: 4 << 30}), slots(4, 3))},
			want:  "b"},
		{name: "an output limit above every node's maximum waits",
			need:    placement.Need{OutputLimitBytes: 4 << 30},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxOutputBytes: 1 << 30})), node("b", limits(placement.Limits{MaxOutputBytes: 512 << 20}))},
			unsched: true, why: "cannot run on any node: no node allows 4 GiB of output for one task (largest: 1 GiB)"},
		{name: "egress within a permitted range",
			need:  placement.Need{AllowEgress: egress("10.1.2.0/24", "169.254.169.254/32")},
			cands: []*placement.Candidate{node("a", permit("10.0.0.0/8")), node("b", permit("10.0.0.0/8", "169.254.0.0/16"), slots(4, 3))},
			want:  "b"},
		{name: "egress to a range wider than the permitted one waits, naming it",
			need:    placement.Need{AllowEgress: egress("10.0.0.0/8")},
			cands:   []*placement.Candidate{node("a", permit("10.1.0.0/16")), node("b")},
			unsched: true, why: "cannot run on any node: no node permits egress to 10.0.0.0/8 (allow_egress; a node permits ranges with podium-agent --permit-egress)"},
		{name: "egress in another address family is not permitted",
			need:    placement.Need{AllowEgress: egress("fd00::/64")},
			cands:   []*placement.Candidate{node("a", permit("0.0.0.0/0"))},
			unsched: true, why: "permits egress to fd00::/64"},
		{name: "egress naming a range that is not a CIDR is never placed",
			need:    placement.Need{AllowEgress: egress("not-a-cidr")},
			cands:   []*placement.Candidate{node("a", permit("0.0.0.0/0"))},
			unsched: true, why: "permits egress to a range that is not a CIDR"},
		{name: "a node with no permitted ranges takes tasks without allow_egress",
			cands: []*placement.Candidate{node("a")}, want: "a"},
		{name: "each limit allowed somewhere but not all on one node",
			need:    placement.Need{MemoryMB: 8 * gib, CPU: 8},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxMemoryMB: 8 * gib, MaxCPU: 4})), node("b", limits(placement.Limits{MaxMemoryMB: 4 * gib, MaxCPU: 8}))},
			unsched: true, why: "cannot run on any node: no node allows all the task asks for at once (8 GiB of memory, 8 CPU)"},
		{name: "the reason names the first limit no node allows, memory before CPU",
			need:    placement.Need{MemoryMB: 8 * gib, CPU: 8, Pids: 99999},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxMemoryMB: 4 * gib, MaxCPU: 4, MaxPids: 100}))},
			unsched: true, why: "8 GiB of memory"},
		{name: "with labels, the reason says which nodes it means",
			need:    placement.Need{Labels: []string{"gpu"}, Pids: 200},
			cands:   []*placement.Candidate{node("a", labels("gpu"), limits(placement.Limits{MaxPids: 100})), node("b", limits(placement.Limits{MaxPids: 1000}))},
			unsched: true, why: "cannot run on any node: no node with the labels the task needs allows 200 processes for one task (largest: 100)"},
		{name: "limits no node allows are named before draining: the task could never run",
			need:    placement.Need{MemoryMB: 8 * gib},
			cands:   []*placement.Candidate{node("a", draining, limits(placement.Limits{MaxMemoryMB: 4 * gib}))},
			unsched: true, why: "cannot run on any node: no node allows 8 GiB"},
		{name: "a draining node that allows the task is named, not its limits",
			need:  placement.Need{MemoryMB: 8 * gib},
			cands: []*placement.Candidate{node("a", draining, limits(placement.Limits{MaxMemoryMB: 8 * gib})), node("b", limits(placement.Limits{MaxMemoryMB: 4 * gib}))},
			why:   "draining"},
		{name: "a node that allows the task but is too small in all, beside one roomy that refuses it: unschedulable, naming the size",
			need:    placement.Need{MemoryMB: 8 * gib},
			cands:   []*placement.Candidate{node("a", mem(4*gib, 0)), node("b", mem(64*gib, 0), limits(placement.Limits{MaxMemoryMB: 4 * gib}))},
			unsched: true, why: "cannot run on any node: it asks 8 GiB of memory (its sidecars' included) and the largest node with limits that allow it has 4 GiB"},
		{name: "a node that allows the task but lacks room now, the reason is room, not limits",
			need:  placement.Need{MemoryMB: 8 * gib},
			cands: []*placement.Candidate{node("a", mem(16*gib, 12*gib)), node("b", mem(64*gib, 0), limits(placement.Limits{MaxMemoryMB: 4 * gib}))},
			why:   "waiting: no node has 8 GiB free now"},
		{name: "a node that refuses is never chosen over a busy one that allows",
			need:  placement.Need{Pids: 500},
			cands: []*placement.Candidate{node("a", limits(placement.Limits{MaxPids: 100})), node("b", slots(1, 1))},
			why:   "busy"},

		// Privileged sidecars (podium-agent --allow-privileged-sidecars).
		{name: "a task with a privileged sidecar goes only to a node that allows them",
			need:  placement.Need{PrivilegedSidecars: true},
			cands: []*placement.Candidate{node("a", slots(8, 0)), node("b", privileged), node("c", slots(8, 0))}, want: "b"},
		{name: "no node allows privileged sidecars, and the reason says which flag would",
			need:    placement.Need{PrivilegedSidecars: true},
			cands:   []*placement.Candidate{node("a"), node("b", limits(placement.Limits{MaxMemoryMB: 64 * gib}))},
			unsched: true, why: "cannot run on any node: no node allows privileged sidecars (start the agent with --allow-privileged-sidecars)"},
		{name: "privileged sidecars are named before memory",
			need:    placement.Need{PrivilegedSidecars: true, MemoryMB: 8 * gib},
			cands:   []*placement.Candidate{node("a", limits(placement.Limits{MaxMemoryMB: 4 * gib}))},
			unsched: true, why: "no node allows privileged sidecars"},
		{name: "with labels, the privileged reason says which nodes it means",
			need:    placement.Need{Labels: []string{"docker"}, PrivilegedSidecars: true},
			cands:   []*placement.Candidate{node("a", labels("docker")), node("b", privileged)},
			unsched: true, why: "no node with the labels the task needs allows privileged sidecars"},
		{name: "a node that allows privileged sidecars but too little memory, and another the reverse",
			need:    placement.Need{PrivilegedSidecars: true, MemoryMB: 8 * gib},
			cands:   []*placement.Candidate{node("a", privileged, limits(placement.Limits{MaxMemoryMB: 4 * gib, AllowPrivilegedSidecars: true})), node("b")},
			unsched: true, why: "no node allows all the task asks for at once (privileged sidecars, 8 GiB of memory)"},
		{name: "a node that allows privileged sidecars still takes ordinary tasks",
			cands: []*placement.Candidate{node("a", privileged)}, want: "a"},

		// Slots, drain, and the order of the reasons.
		{name: "no node connected", why: "no node is connected"},
		{name: "a draining node takes nothing new",
			cands: []*placement.Candidate{node("a", draining), node("b", slots(4, 3))}, want: "b"},
		{name: "labels are named before draining",
			need:  placement.Need{Labels: []string{"gpu"}},
			cands: []*placement.Candidate{node("a", draining)}, unsched: true, why: "every label"},
		{name: "draining is named before size",
			need:  placement.Need{Labels: []string{"gpu"}, CPU: 8},
			cands: []*placement.Candidate{node("a", labels("gpu"), draining), node("b", cpu(16, 0))}, why: "every node that could run the task is draining"},
		{name: "size is named before busy",
			need:  placement.Need{CPU: 8},
			cands: []*placement.Candidate{node("a", cpu(4, 0)), node("b", cpu(16, 0), draining)}, why: "draining"},
		{name: "room is named before busy",
			need:  placement.Need{CPU: 8},
			cands: []*placement.Candidate{node("a", cpu(16, 10)), node("b", cpu(16, 10), slots(1, 1))}, why: "waiting: no node has 8 CPU free now"},
		{name: "every fitting node is busy",
			cands: []*placement.Candidate{node("a", slots(1, 1)), node("b", slots(2, 3))}, why: "every node that could run the task is busy: it waits for a free slot"},

		// The choice among nodes that fit.
		{name: "most free slots wins over an earlier assignment and a lower id",
			cands: []*placement.Candidate{
				node("a", slots(4, 2)),                      // 2 free, never assigned
				node("b", slots(8, 5), assigned(t0.Add(1))), // 3 free
			}, want: "b"},
		{name: "on equal free slots, the node assigned longest ago",
			cands: []*placement.Candidate{
				node("a", slots(4, 1), assigned(t0.Add(time.Second))),
				node("b", slots(5, 2), assigned(t0)),
				node("c", slots(3, 0), assigned(t0.Add(2*time.Second))),
			}, want: "b"},
		{name: "a node never assigned counts as assigned longest ago",
			cands: []*placement.Candidate{node("a", assigned(t0)), node("b")}, want: "b"},
		{name: "on equal free slots and assignment time, the lowest id",
			cands: []*placement.Candidate{node("c", assigned(t0)), node("a", assigned(t0)), node("b", assigned(t0))}, want: "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			i, r := placement.Place(c.need, c.cands)
			why := r.Text
			switch {
			case c.want != "" && (i < 0 || c.cands[i].ID != c.want):
				got := "nothing (" + why + ")"
				if i >= 0 {
					got = c.cands[i].ID
				}
				t.Fatalf("placed on %s, want %s", got, c.want)
			case c.want == "" && i >= 0:
				t.Fatalf("placed on %s, want no placement because %q", c.cands[i].ID, c.why)
			case c.want == "" && !strings.Contains(why, c.why):
				t.Fatalf("reason %q, want one containing %q", why, c.why)
			case c.want != "" && (why != "" || r.Unschedulable):
				t.Fatalf("placed with a reason %+v; a placement has none", r)
			case c.want == "" && r.Unschedulable != c.unsched:
				t.Fatalf("reason %q: unschedulable %v, want %v", why, r.Unschedulable, c.unsched)
			case r.Unschedulable != strings.HasPrefix(why, placement.Unschedulable):
				t.Fatalf("reason %q: unschedulable %v, but the reason says otherwise", why, r.Unschedulable)
			}
		})
	}
}

func TestCostCountsEverySidecar(t *testing.T) {
	t.Parallel()
	res := func(cpu float64, mb int64) *podiumv1.Resources { return &podiumv1.Resources{Cpu: cpu, MemoryMb: mb} }
	cases := []struct {
		name    string
		spec    *podiumv1.TaskSpec
		cpu     float64
		mem     int64
		comment string
	}{
		{name: "no spec", spec: nil},
		{name: "no limits", spec: &podiumv1.TaskSpec{Image: "busybox"}},
		{name: "main container only", spec: &podiumv1.TaskSpec{Resources: res(1.5, 256)}, cpu: 1.5, mem: 256},
		{name: "sidecars add to the main container",
			spec: &podiumv1.TaskSpec{Resources: res(1, 512), Sidecars: []*podiumv1.Sidecar{
				{Name: "db", Resources: res(0.5, 1024)}, {Name: "cache", Resources: res(0.25, 128)}}},
			cpu: 1.75, mem: 1664},
		{name: "a sidecar without limits adds nothing",
			spec: &podiumv1.TaskSpec{Resources: res(2, 100), Sidecars: []*podiumv1.Sidecar{{Name: "log"}}},
			cpu:  2, mem: 100},
	}
	for _, c := range cases {
		cpu, mem := placement.Cost(c.spec)
		if cpu != c.cpu || mem != c.mem {
			t.Errorf("%s: cost %g CPU, %d MB; want %g CPU, %d MB", c.name, cpu, mem, c.cpu, c.mem)
		}
	}
}

func TestPidsCostCountsEverySidecar(t *testing.T) {
	t.Parallel()
	spec := &podiumv1.TaskSpec{Resources: &podiumv1.Resources{Pids: 100}, Sidecars: []*podiumv1.Sidecar{
		{Name: "db", Resources: &podiumv1.Resources{Pids: 50}}, {Name: "log"}}}
	if got := placement.PidsCost(spec); got != 150 {
		t.Fatalf("PidsCost = %d, want 150", got)
	}
	if got := placement.PidsCost(nil); got != 0 {
		t.Fatalf("PidsCost(nil) = %d, want 0", got)
	}
}

func TestParseEgressMasksAndKeepsBadRangesUnplaceable(t *testing.T) {
	t.Parallel()
	got := placement.ParseEgress([]string{"10.1.2.3/8", "nonsense"})
	if len(got) != 2 || got[0] != netip.MustParsePrefix("10.0.0.0/8") || got[1].IsValid() {
		t.Fatalf("ParseEgress = %v, want [10.0.0.0/8 invalid]", got)
	}
	if placement.ParseEgress(nil) != nil {
		t.Fatal("ParseEgress(nil) allocated a slice")
	}
}

// A task whose main container fits but whose sidecars do not is refused: the
// sidecars run on the same node.
func TestPlaceRefusesATaskWhoseSidecarsDoNotFit(t *testing.T) {
	t.Parallel()
	spec := &podiumv1.TaskSpec{
		Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 512},
		Sidecars:  []*podiumv1.Sidecar{{Name: "db", Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 1024}}},
	}
	c, m := placement.Cost(spec)
	need := placement.Need{CPU: c, MemoryMB: m}
	small := node("small", cpu(4, 0), mem(1024, 0))
	if i, why := placement.Place(need, []*placement.Candidate{small}); i >= 0 || !why.Unschedulable ||
		!strings.Contains(why.Text, "it asks 1,536 MiB of memory (its sidecars' included) and the largest node has 1 GiB") {
		t.Fatalf("placed %d (%+v) on a node with room for the main container only; want it unschedulable, naming 1,536 MiB", i, why)
	}
	big := node("big", cpu(4, 0), mem(2048, 0))
	if i, why := placement.Place(need, []*placement.Candidate{small, big}); i != 1 {
		t.Fatalf("placed %d (%+v), want the node with room for the sidecars too", i, why)
	}
}

// Charging each placement to its node is what keeps one pass from
// over-committing: the pass spreads tasks by free slots, and stops at a
// node's slots, CPU and memory.
func TestChargedPlacementsNeverOverCommit(t *testing.T) {
	t.Parallel()
	cands := []*placement.Candidate{
		node("a", slots(2, 0)),
		node("b", slots(3, 0)),
		node("c", slots(8, 0), cpu(4, 0), mem(4096, 0)),
	}
	need := placement.Need{CPU: 1.5, MemoryMB: 1024}
	var got []string
	for n := range 10 {
		i, why := placement.Place(need, cands)
		if i < 0 {
			if n != 7 || !strings.Contains(why.Text, "busy") {
				t.Fatalf("task %d: nothing placed (%+v); want 7 placed, then busy", n, why)
			}
			break
		}
		cands[i].Charge(need, t0.Add(time.Duration(n)*time.Second))
		got = append(got, cands[i].ID)
	}
	// c has the most slots, but only room for two tasks of 1.5 CPU; the
	// others take turns by free slots, then by the older assignment.
	if want := "c c b a b a b"; strings.Join(got, " ") != want {
		t.Fatalf("placed on %s, want %s", strings.Join(got, " "), want)
	}
	for _, c := range cands {
		if c.Running > c.SlotLimit || (c.CPUCores > 0 && c.CommittedCPU > c.CPUCores) || (c.MemoryMB > 0 && c.CommittedMemMB > c.MemoryMB) {
			t.Errorf("node %s over-committed: %+v", c.ID, *c)
		}
	}
}

func TestPlaceAllocatesNothing(t *testing.T) {
	cands := make([]*placement.Candidate, 2000)
	for i := range cands {
		cands[i] = node(fmt.Sprintf("node_%04d", i), labels("linux", "x86"), slots(8, int32(i%8)),
			cpu(16, float64(i%16)), mem(32768, int64(i%7)*1024), assigned(t0.Add(time.Duration(i%5)*time.Second)))
	}
	for i, c := range cands {
		// Half the fleet has limits, every one of which the task is within.
		if i%2 == 0 {
			c.Limits = placement.Limits{MaxCPU: 8, MaxMemoryMB: 8192, MaxPids: 4096, MaxTimeoutSeconds: 3600,
				MaxOutputBytes: 1 << 30, PermitEgress: egress("10.0.0.0/8", "192.168.0.0/16")}
		}
	}
	placed := placement.Need{Labels: []string{"x86"}, CPU: 1, MemoryMB: 512, Pids: 100, TimeoutSeconds: 600,
		OutputLimitBytes: 1 << 20, AllowEgress: egress("192.168.1.0/24")}
	refused := placement.Need{Labels: []string{"gpu"}}
	if allocs := testing.AllocsPerRun(100, func() {
		if i, _ := placement.Place(placed, cands); i < 0 {
			t.Fatal("nothing placed")
		}
	}); allocs != 0 {
		t.Fatalf("Place allocated %.0f times per placement; it runs for every task of every pass, and must allocate nothing", allocs)
	}
	// A refusal formats its reason: that allocates, once per waiting task,
	// not per node looked at.
	if allocs := testing.AllocsPerRun(100, func() { placement.Place(refused, cands) }); allocs > 10 {
		t.Fatalf("a refusal allocated %.0f times; it should only format its reason", allocs)
	}
}

// The fair-share reason names the sharer and its counts as people read
// them, thousands separated.
func TestFairShareReason(t *testing.T) {
	for _, tc := range []struct {
		by              string
		running, queued int64
		want            string
	}{
		{"alice", 40, 4960, "waiting for its fair share: alice has 40 running, 4,960 queued"},
		{"group ml", 0, 1234567, "waiting for its fair share: group ml has 0 running, 1,234,567 queued"},
		{"", 999, 1000, "waiting for its fair share: its submitter has 999 running, 1,000 queued"},
	} {
		if got := placement.FairShareReason(tc.by, tc.running, tc.queued); got != tc.want {
			t.Errorf("FairShareReason(%q, %d, %d) = %q, want %q", tc.by, tc.running, tc.queued, got, tc.want)
		}
	}
}
