// Package placement is who picks a node: given what a queued task needs and
// the connected nodes with what they are already committed to, it chooses
// the node the task goes to, or says, in words the task's owner can act on,
// why none can take it yet, and whether none ever could (Unschedulable).
//
// A task is unschedulable when no node of the fleet could run it even with
// nothing else on it: no node has every label it needs, allows what it asks
// (the node's limits, privileged sidecars, egress), has as many GPUs of the
// model and memory it asks for, or has the CPU and memory it asks for in
// all. The fleet, for this, is every enrolled node that has connected at
// least once, connected now or not (Candidate.Absent), as it last reported
// itself: a node that is down for a reboot is still one the task may run
// on, and one retired for good is removed (podium node rm). What changes
// with load or an operator's action (room, slots, draining, a Docker engine
// down, a full data disk) never makes a task unschedulable: it waits.
//
// It is policy and nothing else: no Postgres, no clock, no goroutines, so
// every rule can be tested with a table of nodes and needs. Package dispatch
// keeps the leader's copy of the fleet and calls Place for each task; the
// store reads the fleet (store.Candidates), claims queued tasks and records
// the placements.
//
// Which task is offered first is not decided here: that is package
// dispatch's policy (dispatch.Order: priority, then fair share between
// sharers), which the store's claim executes in SQL.
package placement

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Candidate is a node a task may be placed on, as the tables last showed it
// plus whatever this replica has placed on it since (Charge). Reading the
// fleet aggregates every active task, so the scheduler keeps one copy
// between passes and charges it instead of reading again per task.
type Candidate struct {
	ID             string
	Labels         []string
	Draining       bool
	SlotLimit      int32
	Running        int32
	CPUCores       float64 // 0: unmeasured, no constraint
	MemoryMB       int64   // 0: unmeasured, no constraint
	CommittedCPU   float64
	CommittedMemMB int64
	LastAssignedAt time.Time // zero when never
	// Limits are the most the node lets one task ask for, as its agent
	// reported them (podium-agent --max-*, --permit-egress).
	Limits Limits
	// GPUs are the node's GPUs as its agent last reported them, and
	// CommittedGPUs the sum of gpus over the tasks active on it.
	GPUs          []GPU
	CommittedGPUs int32
	// DiskFreeMB is the free space of the node's data disk and
	// MinFreeDiskMB its floor (podium-agent --min-free-disk-mb), as its
	// agent last reported them; DiskLowSince is when the disk went below
	// the floor, zero while it is above. A node below its floor takes no
	// new task: each would fail there, or fill the disk further.
	DiskFreeMB    int64
	MinFreeDiskMB int64
	DiskLowSince  time.Time
	// EngineDownSince is since when the node's Docker engine has not
	// answered its agent, as the agent last reported; zero while it
	// answers. Such a node takes no new task: each would fail there at
	// once.
	EngineDownSince time.Time
	// Absent is an enrolled node that is not connected now (offline,
	// unreachable, between streams), as it last reported itself. Nothing is
	// placed on it; it counts only in telling a task no node could ever run
	// (unschedulable) from one that waits for a node to come back.
	Absent bool
}

// GPU is one of a node's GPUs as placement needs it: what a task's
// gpu_model and gpu_memory_mb are matched against. Which GPU a task gets is
// the node's choice, so no UUID is needed here.
type GPU struct {
	Model    string
	MemoryMB int64
}

// Limits are a node's bounds on one task. A zero bound is no bound, as in
// the protocol's TaskLimits. They are not room: a node with 64 GiB free that
// allows 4 GiB per task never takes a task asking for 8, however idle it is.
type Limits struct {
	MaxCPU            float64
	MaxMemoryMB       int64
	MaxPids           int64
	MaxTimeoutSeconds int64
	MaxOutputBytes    int64
	// PermitEgress are the ranges a task's allow_egress may name: each of
	// its ranges must lie within one of these.
	PermitEgress []netip.Prefix
	// AllowPrivilegedSidecars: the node runs sidecars that ask to be
	// privileged (podium-agent --allow-privileged-sidecars). A privileged
	// container is root on its machine, so this is the operator's choice
	// per node, never the task's.
	AllowPrivilegedSidecars bool
}

// Need is what a task asks of a node: every label, its Cost, and what the
// node's Limits are checked against. A zero field asks for nothing: the task
// then runs under the node's default for it, which the node keeps within its
// own maximum.
type Need struct {
	Labels   []string
	CPU      float64
	MemoryMB int64
	// Pids is the task's process limit with its sidecars' (PidsCost).
	Pids int64
	// TimeoutSeconds is the spec's timeout_seconds.
	TimeoutSeconds int64
	// OutputLimitBytes is the spec's output_limit_bytes.
	OutputLimitBytes int64
	// AllowEgress are the spec's allow_egress ranges, parsed and masked.
	AllowEgress []netip.Prefix
	// PrivilegedSidecars: a sidecar of the spec asks to be privileged
	// (taskspec.HasPrivilegedSidecar).
	PrivilegedSidecars bool
	// GPUs is how many whole GPUs the task needs; GPUModel (a glob, ""
	// for any) and GPUMemoryMB (0 for any) say which of a node's GPUs
	// count toward them.
	GPUs        int32
	GPUModel    string
	GPUMemoryMB int64
}

// Cost is what a task takes out of a node's budget: its own limits plus every
// sidecar's, because the sidecars run on the same machine. The submit path
// computes it (tasks.NewRow) and the store keeps it on the task's row, and a
// node's session charges it while the task runs, so
// both sides count the same thing and a task with heavy sidecars cannot
// squeeze onto a node that only has room for its main container.
func Cost(spec *podiumv1.TaskSpec) (cpu float64, memoryMB int64) {
	cpu, memoryMB = spec.GetResources().GetCpu(), spec.GetResources().GetMemoryMb()
	for _, sc := range spec.GetSidecars() {
		cpu += sc.GetResources().GetCpu()
		memoryMB += sc.GetResources().GetMemoryMb()
	}
	return cpu, memoryMB
}

// PidsCost is a task's process limit counted the way its memory is: its
// own plus every sidecar's, since all of them run on the node at once.
func PidsCost(spec *podiumv1.TaskSpec) int64 {
	pids := spec.GetResources().GetPids()
	for _, sc := range spec.GetSidecars() {
		pids += sc.GetResources().GetPids()
	}
	return pids
}

// ParseEgress parses allow_egress ranges for a Need. A range that does not
// parse (the spec's validation refuses it, so only a row written before that
// rule could hold one) becomes the zero Prefix, which no node permits: such
// a task waits, and its reason names the range, rather than running with
// less reach than it asked for.
func ParseEgress(ranges []string) []netip.Prefix {
	if len(ranges) == 0 {
		return nil
	}
	out := make([]netip.Prefix, len(ranges))
	for i, r := range ranges {
		if p, err := netip.ParsePrefix(r); err == nil {
			out[i] = p.Masked()
		}
	}
	return out
}

// FreeSlots is what is left of the slot limit; a draining node has none, so
// it finishes what it runs and takes nothing new, and neither has a node
// whose data disk is below its free-space floor or whose Docker engine does
// not answer.
func (c *Candidate) FreeSlots() int32 {
	if c.Draining || !c.DiskLowSince.IsZero() || !c.EngineDownSince.IsZero() || c.Running >= c.SlotLimit {
		return 0
	}
	return c.SlotLimit - c.Running
}

// Charge books a placement on the node, so the rest of the pass sees it as it
// will be once the task runs. Without it one pass would hand a node every
// task that fits its free room on its own, and over-commit it.
func (c *Candidate) Charge(n Need, at time.Time) {
	c.Running++
	c.CommittedCPU += n.CPU
	c.CommittedMemMB += n.MemoryMB
	c.CommittedGPUs += n.GPUs
	c.LastAssignedAt = at
}

func (c *Candidate) hasLabels(want []string) bool {
	for _, l := range want {
		if !slices.Contains(c.Labels, l) {
			return false
		}
	}
	return true
}

// fits says whether the node's unbooked CPU and memory cover the need. A
// capacity of 0 means the node did not measure it, and is no constraint: a
// node that cannot report its memory still runs tasks. The epsilon keeps
// float sums such as 0.1+0.2 from refusing a task that fits exactly.
func (c *Candidate) fits(n Need) bool {
	if c.CPUCores > 0 && n.CPU > 0 && c.CPUCores-c.CommittedCPU < n.CPU-1e-9 {
		return false
	}
	if c.MemoryMB > 0 && n.MemoryMB > 0 && c.MemoryMB-c.CommittedMemMB < n.MemoryMB {
		return false
	}
	return true
}

// holds says whether the node could run the task with nothing else on it:
// it has every label, allows what the task asks, has as many matching GPUs
// and, in all, the CPU and memory it asks for. What it is committed to, its
// slots, a drain, its engine and its disk are left out: they change.
func (c *Candidate) holds(n Need, match gpuMatch) bool {
	return c.hasLabels(n.Labels) && c.refuses(n) == 0 && (n.GPUs == 0 || c.matchingGPUs(match) >= n.GPUs) &&
		c.cpuHolds(n) && c.memoryHolds(n)
}

// cpuHolds and memoryHolds say whether the node's whole CPU and memory
// cover the need; an unmeasured capacity (0) is no constraint, as in fits.
func (c *Candidate) cpuHolds(n Need) bool { return c.CPUCores == 0 || n.CPU <= c.CPUCores+1e-9 }

func (c *Candidate) memoryHolds(n Need) bool { return c.MemoryMB == 0 || n.MemoryMB <= c.MemoryMB }

// gpuMatch says whether a GPU is one a task may be given: its memory is at
// least the task's gpu_memory_mb and its name matches the task's gpu_model.
// The pattern is parsed once per task, not once per GPU of every node.
type gpuMatch func(GPU) bool

func matcher(n Need) gpuMatch {
	model := taskspec.GPUModelMatcher(n.GPUModel)
	return func(g GPU) bool { return g.MemoryMB >= n.GPUMemoryMB && model(g.Model) }
}

// matchingGPUs counts the node's GPUs that match.
func (c *Candidate) matchingGPUs(match gpuMatch) int32 {
	var m int32
	for _, g := range c.GPUs {
		if match(g) {
			m++
		}
	}
	return m
}

// FreeGPUs is how many of the node's GPUs matching n no active task holds:
// its matching GPUs less every GPU its tasks were given, whatever model
// those asked for. That is pessimistic when tasks asking for different
// models share a node (a task holding the node's one A100 leaves its H100s
// free, yet is subtracted from them too), and it is what lets placement
// stay a count: the node picks the GPUs, so the coordinator does not know
// which ones are held, and a count that can only be too low never sends a
// node a task it would refuse.
func (c *Candidate) FreeGPUs(n Need) int32 {
	return c.freeGPUs(matcher(n))
}

func (c *Candidate) freeGPUs(match gpuMatch) int32 {
	return max(c.matchingGPUs(match)-c.CommittedGPUs, 0)
}

// The limits a task can ask more of than a node allows, in the order a
// refusal names them: the first is the one a user is likeliest to have set
// on purpose.
//
// Privileged sidecars come first: nothing the task's owner changes in the
// spec short of dropping them makes a node allow them, and an operator
// reading the reason learns which flag to set.
const (
	limPrivileged = 1 << iota
	limMemory
	limCPU
	limPids
	limTimeout
	limOutput
	limEgress
	limAll = limPrivileged | limMemory | limCPU | limPids | limTimeout | limOutput | limEgress
)

// refuses returns the limits of n that the node does not allow, as a set of
// lim bits; 0 means it allows everything n asks for.
func (c *Candidate) refuses(n Need) int {
	l := &c.Limits
	bad := 0
	if n.PrivilegedSidecars && !l.AllowPrivilegedSidecars {
		bad |= limPrivileged
	}
	if l.MaxMemoryMB > 0 && n.MemoryMB > l.MaxMemoryMB {
		bad |= limMemory
	}
	if l.MaxCPU > 0 && n.CPU > l.MaxCPU+1e-9 {
		bad |= limCPU
	}
	if l.MaxPids > 0 && n.Pids > l.MaxPids {
		bad |= limPids
	}
	if l.MaxTimeoutSeconds > 0 && n.TimeoutSeconds > l.MaxTimeoutSeconds {
		bad |= limTimeout
	}
	if l.MaxOutputBytes > 0 && n.OutputLimitBytes > l.MaxOutputBytes {
		bad |= limOutput
	}
	for _, p := range n.AllowEgress {
		if !l.permits(p) {
			bad |= limEgress
			break
		}
	}
	return bad
}

// permits says whether the range p lies wholly within one the node permits.
// The zero Prefix (a range that did not parse) lies within none.
func (l *Limits) permits(p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	for _, q := range l.PermitEgress {
		if q.IsValid() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// Busy is Place's reason when every node that could run the task has no
// free slot. A pass's PlaceFunc (dispatch.PlaceOn) replaces it with
// FairShareReason when other sharers' tasks compete for the same slots.
const Busy = "every node that could run the task is busy: it waits for a free slot"

// Unschedulable is how the reason of a task no node could ever run starts.
const Unschedulable = "cannot run on any node: "

// Reason is why Place placed a task nowhere.
type Reason struct {
	// Text is the reason as the task's owner reads it.
	Text string
	// Unschedulable says no node of the fleet could run the task even with
	// nothing else on it; Text then starts with Unschedulable and says
	// what to change. Otherwise the task waits for something that changes
	// by itself or by an operator's hand (room, a slot, a node to come
	// back, a drain to end).
	Unschedulable bool
}

func waits(text string) Reason { return Reason{Text: text} }

// FairShareReason says why a task waits while others' tasks take the slots
// it could use: its submitter already holds their share. running and
// queued are the submitter's tasks holding a slot and queued at the task's
// priority (this one included).
func FairShareReason(by string, running, queued int64) string {
	if by == "" {
		by = "its submitter"
	}
	return fmt.Sprintf("waiting for its fair share: %s has %s running, %s queued", by, thousands(running), thousands(queued))
}

// thousands writes n with a comma between each group of three digits, as
// people read counts of tasks: 4,960.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Place picks a node for a task: among the connected nodes that could run
// it at all (they carry every label it needs, allow what it asks for, have
// as many GPUs of the model and memory it asks for and, in all, the CPU and
// memory: Candidate.holds), the undrained ones with the CPU and memory free
// for it, as many free matching GPUs as it needs and a free slot, the one
// with the most free slots, which spreads work instead of filling one node
// first; ties go to the node assigned longest ago, then the lowest id, so
// equal nodes take turns and the choice is the same on every run. A node
// whose Docker engine does not answer, or whose data disk is below its
// free-space floor, takes nothing, and neither does an absent one
// (Candidate.Absent).
//
// It returns the index into cands, or -1 and the reason when none fits. A
// task no node of the fleet could ever run is unschedulable, and its reason
// names the first thing no node offers (labels, then a node's limits, then
// GPUs of the model and memory, then as many GPUs, then CPU and memory in
// all) and what to change. A task that only nodes not connected now could
// run waits for one, and its reason names one. Otherwise it waits for what
// keeps the nodes that could run it from taking it, the first that has to
// change named: a drain, then an engine down, then a full data disk, then
// room, then GPUs all taken, then slots. A task that asks for more than
// every node allows is never sent to a node that would refuse it: the
// node's refusal is only its last line of defence.
//
// It looks at each node once and allocates nothing (but, for a task asking
// for GPUs, its parsed model pattern, once): one pass places hundreds of
// tasks among thousands of nodes. A task no connected node could run looks
// at the nodes again, for its reason.
func Place(n Need, cands []*Candidate) (int, Reason) {
	connected, held, undrained, engineOK, diskOK, roomy, gpuFree := false, false, false, false, false, false, false
	var mostFreeGPUs int32 // among the nodes with matching GPUs and room, for the reason
	var match gpuMatch
	if n.GPUs > 0 {
		match = matcher(n)
	}
	best := -1
	var bestFree int32
	for i, c := range cands {
		if c.Absent {
			continue
		}
		connected = true
		if !c.holds(n, match) {
			continue
		}
		held = true
		if c.Draining {
			continue
		}
		undrained = true
		if !c.EngineDownSince.IsZero() {
			continue
		}
		engineOK = true
		if !c.DiskLowSince.IsZero() {
			continue
		}
		diskOK = true
		if !c.fits(n) {
			continue
		}
		roomy = true
		if n.GPUs > 0 {
			f := c.freeGPUs(match)
			mostFreeGPUs = max(mostFreeGPUs, f)
			if f < n.GPUs {
				continue
			}
		}
		gpuFree = true
		free := c.FreeSlots()
		if free == 0 {
			continue
		}
		if best >= 0 {
			b := cands[best]
			switch {
			case free != bestFree:
				if free < bestFree {
					continue
				}
			case !c.LastAssignedAt.Equal(b.LastAssignedAt):
				if c.LastAssignedAt.After(b.LastAssignedAt) {
					continue
				}
			case c.ID > b.ID:
				continue
			}
		}
		best, bestFree = i, free
	}
	switch {
	case best >= 0:
		return best, Reason{}
	case len(cands) == 0:
		return -1, waits("no node is connected")
	case !held:
		absent := absentHolder(n, cands, match)
		switch {
		case absent == nil:
			return -1, Reason{Text: Unschedulable + neverReason(n, cands, match), Unschedulable: true}
		case !connected:
			return -1, waits("no node is connected")
		}
		return -1, waits(fmt.Sprintf("no connected node could run it, but node %s, which is not connected now, could: it waits for such a node to come back", absent.ID))
	case !undrained:
		return -1, waits("every node that could run the task is draining")
	case !engineOK:
		return -1, waits(engineDownReason(n, cands, match))
	case !diskOK:
		return -1, waits(diskLowReason(n, cands, match))
	case !roomy:
		return -1, waits(roomReason(n))
	case !gpuFree:
		return -1, waits(fmt.Sprintf("no connected node has %d free %s%s (largest: %d)", n.GPUs, plural(n.GPUs, "GPU"), gpuFilter(n), mostFreeGPUs))
	}
	return -1, waits(Busy)
}

// absentHolder is the first absent node that could hold the task
// (Candidate.holds); nil when none could.
func absentHolder(n Need, cands []*Candidate, match gpuMatch) *Candidate {
	for _, c := range cands {
		if c.Absent && c.holds(n, match) {
			return c
		}
	}
	return nil
}

// roomReason says why a task waits that some node could hold but none has
// room for now. It names only what the task asks for: never "0 CPU".
func roomReason(n Need) string {
	var want []string
	if n.CPU > 0 {
		want = append(want, fmt.Sprintf("%g CPU", n.CPU))
	}
	if n.MemoryMB > 0 {
		want = append(want, mib(n.MemoryMB))
	}
	return fmt.Sprintf("waiting: no node has %s free now (its sidecars' included): it runs when running tasks end and free the room",
		strings.Join(want, " and "))
}

// neverReason says what no node of the fleet offers a task, and what to
// change: the first of labels, a node's limits, GPUs of the model and
// memory, as many GPUs, and CPU and memory in all that no node has, among
// the nodes that offer everything before it. It runs only for a task no
// node could hold, so it may allocate and look at the nodes again.
func neverReason(n Need, cands []*Candidate, match gpuMatch) string {
	labelled, allowed, refusedSome, modelled, sized := false, false, false, false, false
	cpuOK, memOK := false, false
	var mostGPUs int32
	var mostCPU float64
	var mostMem int64
	for _, c := range cands {
		if !c.hasLabels(n.Labels) {
			continue
		}
		labelled = true
		if c.refuses(n) != 0 {
			refusedSome = true
			continue
		}
		allowed = true
		if n.GPUs > 0 {
			m := c.matchingGPUs(match)
			if m == 0 {
				continue
			}
			modelled = true
			mostGPUs = max(mostGPUs, m)
			if m < n.GPUs {
				continue
			}
		}
		sized = true
		cpuOK, memOK = cpuOK || c.cpuHolds(n), memOK || c.memoryHolds(n)
		mostCPU, mostMem = max(mostCPU, c.CPUCores), max(mostMem, c.MemoryMB)
	}
	var with []string
	if len(n.Labels) > 0 {
		with = append(with, "the labels the task needs")
	}
	if refusedSome {
		with = append(with, "limits that allow it")
	}
	switch {
	case !labelled:
		return fmt.Sprintf("no node has every label the task needs (%s); label a node (podium node label NODE --add LABEL) or change the task's labels",
			strings.Join(n.Labels, ", "))
	case !allowed:
		return limitsReason(n, cands)
	case n.GPUs > 0 && !modelled:
		return fmt.Sprintf("no node%s has a GPU%s; loosen gpu_model or gpu_memory_mb, or enroll a node with such GPUs",
			qualified(with), gpuFilter(n))
	case !sized:
		return fmt.Sprintf("it asks for %d %s%s and the most a node%s has is %d; ask for fewer, or enroll a node with more",
			n.GPUs, plural(n.GPUs, "GPU"), gpuFilter(n), qualified(with), mostGPUs)
	}
	if n.GPUs > 0 {
		with = append(with, fmt.Sprintf("%d %s%s", n.GPUs, plural(n.GPUs, "GPU"), gpuFilter(n)))
	}
	switch {
	case !memOK:
		return fmt.Sprintf("it asks %s of memory (its sidecars' included) and the largest node%s has %s; lower resources.memory_mb or enroll a bigger node",
			mibCount(n.MemoryMB), qualified(with), mibCount(mostMem))
	case !cpuOK:
		return fmt.Sprintf("it asks %g CPU (its sidecars' included) and the largest node%s has %g CPU; lower resources.cpu or enroll a bigger node",
			n.CPU, qualified(with), mostCPU)
	}
	return fmt.Sprintf("it asks %g CPU and %s of memory (its sidecars' included) and no node%s has both; lower resources.cpu or resources.memory_mb, or enroll a bigger node",
		n.CPU, mibCount(n.MemoryMB), qualified(with))
}

// qualified writes what a reason's nodes have: "" for any node, " with A",
// " with A and B", " with A, B and C".
func qualified(with []string) string {
	switch len(with) {
	case 0:
		return ""
	case 1:
		return " with " + with[0]
	}
	return " with " + strings.Join(with[:len(with)-1], ", ") + " and " + with[len(with)-1]
}

func plural(n int32, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// engineDownReason says why no connected, undrained node that could run
// the task takes it: the Docker engine of each does not answer. It names
// the one down longest.
func engineDownReason(n Need, cands []*Candidate, match gpuMatch) string {
	down := longestSince(n, cands, match, func(c *Candidate) time.Time { return c.EngineDownSince })
	return fmt.Sprintf("every undrained node that could run the task has a Docker engine that does not answer (node %s: its Docker engine has not answered since %s; "+
		"systemctl status docker on the node): it waits for an engine", down.ID, down.EngineDownSince.UTC().Format(time.RFC3339))
}

// diskLowReason says why no connected, undrained node that could run the
// task and whose engine answers takes it: each is below its data disk's
// free-space floor. It names the one below longest.
func diskLowReason(n Need, cands []*Candidate, match gpuMatch) string {
	low := longestSince(n, cands, match, func(c *Candidate) time.Time {
		if !c.EngineDownSince.IsZero() {
			return time.Time{} // the engine's reason, not the disk's
		}
		return c.DiskLowSince
	})
	return fmt.Sprintf("every undrained node that could run the task is below its data disk's free-space floor (node %s: %d MiB free, floor %d MiB, since %s; "+
		"podium-agent --min-free-disk-mb): it waits for room", low.ID, low.DiskFreeMB, low.MinFreeDiskMB,
		low.DiskLowSince.UTC().Format(time.RFC3339))
}

// longestSince is, of the connected, undrained nodes that could run the
// task and keep from taking tasks for something since a time (since, zero
// while they do not), the one that has kept from it longest: likely to stay
// so longest too, the node a reason names.
func longestSince(n Need, cands []*Candidate, match gpuMatch, since func(*Candidate) time.Time) *Candidate {
	var worst *Candidate
	for _, c := range cands {
		if c.Absent || c.Draining || since(c).IsZero() || !c.holds(n, match) {
			continue
		}
		if worst == nil || since(c).Before(since(worst)) {
			worst = c
		}
	}
	return worst
}

// gpuFilter names what a task asks of each GPU, for a reason: ` matching
// "NVIDIA H100*" with at least 81920 MiB`, or "" when it asks nothing of them.
func gpuFilter(n Need) string {
	s := ""
	if n.GPUModel != "" {
		s += fmt.Sprintf(" matching %q", n.GPUModel)
	}
	if n.GPUMemoryMB > 0 {
		s += fmt.Sprintf(" with at least %d MiB", n.GPUMemoryMB)
	}
	return s
}

// limitsReason says why no node of the fleet with the task's labels allows
// what it asks for: the first limit none of them allows, with the most any
// of them does, or, when each limit is allowed by some node but no node
// allows them all, which ones. It runs only for a task that waits, so it
// may allocate and look at the nodes again.
func limitsReason(n Need, cands []*Candidate) string {
	someAllow := 0 // the limits at least one node allows
	var most Limits
	for _, c := range cands {
		if !c.hasLabels(n.Labels) {
			continue
		}
		someAllow |= limAll &^ c.refuses(n)
		l := &c.Limits
		most.MaxMemoryMB = max(most.MaxMemoryMB, l.MaxMemoryMB)
		most.MaxCPU = max(most.MaxCPU, l.MaxCPU)
		most.MaxPids = max(most.MaxPids, l.MaxPids)
		most.MaxTimeoutSeconds = max(most.MaxTimeoutSeconds, l.MaxTimeoutSeconds)
		most.MaxOutputBytes = max(most.MaxOutputBytes, l.MaxOutputBytes)
	}
	which := "no node"
	if len(n.Labels) > 0 {
		which = "no node with the labels the task needs"
	}
	switch none := limAll &^ someAllow; {
	case none&limPrivileged != 0:
		return which + " allows privileged sidecars (start the agent with --allow-privileged-sidecars)"
	case none&limMemory != 0:
		return fmt.Sprintf("%s allows %s of memory for one task (largest: %s)", which, mib(n.MemoryMB), mib(most.MaxMemoryMB))
	case none&limCPU != 0:
		return fmt.Sprintf("%s allows %g CPU for one task (largest: %g CPU)", which, n.CPU, most.MaxCPU)
	case none&limPids != 0:
		return fmt.Sprintf("%s allows %d processes for one task (largest: %d)", which, n.Pids, most.MaxPids)
	case none&limTimeout != 0:
		return fmt.Sprintf("%s allows a timeout of %s for one task (largest: %s)", which,
			seconds(n.TimeoutSeconds), seconds(most.MaxTimeoutSeconds))
	case none&limOutput != 0:
		return fmt.Sprintf("%s allows %s of output for one task (largest: %s)", which,
			bytesOf(n.OutputLimitBytes), bytesOf(most.MaxOutputBytes))
	case none&limEgress != 0:
		return fmt.Sprintf("%s permits egress to %s (allow_egress; a node permits ranges with podium-agent --permit-egress)",
			which, unpermitted(n, cands))
	}
	// Every limit is allowed somewhere, but never all on one node.
	var asks []string
	if n.PrivilegedSidecars {
		asks = append(asks, "privileged sidecars")
	}
	if n.MemoryMB > 0 {
		asks = append(asks, mib(n.MemoryMB)+" of memory")
	}
	if n.CPU > 0 {
		asks = append(asks, fmt.Sprintf("%g CPU", n.CPU))
	}
	if n.Pids > 0 {
		asks = append(asks, fmt.Sprintf("%d processes", n.Pids))
	}
	if n.TimeoutSeconds > 0 {
		asks = append(asks, "a timeout of "+seconds(n.TimeoutSeconds))
	}
	if n.OutputLimitBytes > 0 {
		asks = append(asks, bytesOf(n.OutputLimitBytes)+" of output")
	}
	if len(n.AllowEgress) > 0 {
		asks = append(asks, "its allow_egress ranges")
	}
	return fmt.Sprintf("%s allows all the task asks for at once (%s): each allows only some of it", which, strings.Join(asks, ", "))
}

// unpermitted is the first of the task's egress ranges that no node with
// its labels permits.
func unpermitted(n Need, cands []*Candidate) string {
	for _, p := range n.AllowEgress {
		ok := false
		for _, c := range cands {
			if c.hasLabels(n.Labels) && c.Limits.permits(p) {
				ok = true
				break
			}
		}
		if !ok {
			if !p.IsValid() {
				return "a range that is not a CIDR"
			}
			return p.String()
		}
	}
	return "its ranges"
}

// mib writes a size in MiB the way a person reads it: whole GiB as GiB.
func mib(mb int64) string {
	if mb >= 1024 && mb%1024 == 0 {
		return fmt.Sprintf("%d GiB", mb/1024)
	}
	return fmt.Sprintf("%d MiB", mb)
}

// mibCount writes an amount of memory in MiB as a machine reports it, whole
// GiB as GiB, else MiB with its thousands separated: "64 GiB", "23,456 MiB".
func mibCount(mb int64) string {
	if mb >= 1024 && mb%1024 == 0 {
		return fmt.Sprintf("%d GiB", mb/1024)
	}
	return thousands(mb) + " MiB"
}

// bytesOf writes a byte count in the largest binary unit that divides it.
func bytesOf(b int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", b>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}

// seconds writes a number of seconds as a duration ("2h0m0s"), or as seconds
// where a time.Duration could not hold it.
func seconds(s int64) string {
	if s > int64(1<<63-1)/int64(time.Second) {
		return fmt.Sprintf("%d s", s)
	}
	return (time.Duration(s) * time.Second).String()
}
