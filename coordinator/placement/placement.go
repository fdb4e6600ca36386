// Package placement is who picks a node: given what a queued task needs and
// the connected nodes with what they are already committed to, it chooses
// the node the task goes to, or says, in words the task's owner can act on,
// why none can take it yet.
//
// It is policy and nothing else: no Postgres, no clock, no goroutines, so
// every rule can be tested with a table of nodes and needs. The scheduler
// keeps the leader's copy of the fleet and calls Place for each task; the
// store reads the fleet (store.Candidates), claims queued tasks and records
// the placements.
//
// Which task is offered first is decided in SQL, not here: the store claims
// queued tasks highest priority first, then oldest, then lowest id, in the
// same statement that locks them FOR UPDATE SKIP LOCKED. The order has to live
// there, because a LIMIT with SKIP LOCKED takes whichever rows the statement
// reaches first; sorting after the claim would sort the wrong tasks.
package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"

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
}

// Need is what a task asks of a node: every label, and its Cost.
type Need struct {
	Labels   []string
	CPU      float64
	MemoryMB int64
}

// Cost is what a task takes out of a node's budget: its own limits plus every
// sidecar's, because the sidecars run on the same machine. The store keeps it
// on the task's row, and a node's session charges it while the task runs, so
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

// FreeSlots is what is left of the slot limit; a draining node has none, so
// it finishes what it runs and takes nothing new.
func (c *Candidate) FreeSlots() int32 {
	if c.Draining || c.Running >= c.SlotLimit {
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

// Place picks a node for a task: among the undrained nodes that carry every
// label the task needs, have the CPU and memory for it and a free slot, the
// one with the most free slots, which spreads work instead of filling one
// node first; ties go to the node assigned longest ago, then the lowest id,
// so equal nodes take turns and the choice is the same on every run. It
// returns the index into cands, or -1 and the reason when none fits, checked
// in an order that names the first thing a user has to fix (labels before
// draining before size before a full fleet).
//
// It looks at each node once and allocates nothing: one pass places hundreds
// of tasks among thousands of nodes.
func Place(n Need, cands []*Candidate) (int, string) {
	if len(cands) == 0 {
		return -1, "no node is connected"
	}
	labelled, undrained, roomy := false, false, false
	best := -1
	var bestFree int32
	for i, c := range cands {
		if !c.hasLabels(n.Labels) {
			continue
		}
		labelled = true
		if c.Draining {
			continue
		}
		undrained = true
		if !c.fits(n) {
			continue
		}
		roomy = true
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
	case !labelled:
		return -1, fmt.Sprintf("no connected node has every label the task needs (%s)", strings.Join(n.Labels, ", "))
	case !undrained:
		return -1, "every node with the labels the task needs is draining"
	case !roomy:
		return -1, fmt.Sprintf("no node has the free CPU and memory the task needs (%g CPU, %d MB with its sidecars)", n.CPU, n.MemoryMB)
	case best < 0:
		return -1, "every node that could run the task is busy: it waits for a free slot"
	}
	return best, ""
}
