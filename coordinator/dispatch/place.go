package dispatch

import (
	"time"

	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
)

// Fleet is placement's working copy of the nodes the store read
// (store.Fleet: the connected nodes, and the absent ones placement counts
// only for whether a task could ever run): what the dispatcher keeps between
// reads and charges with each placement it makes.
func Fleet(nodes []store.Candidate) []*placement.Candidate {
	fleet := make([]*placement.Candidate, len(nodes))
	for i, n := range nodes {
		c := &placement.Candidate{ID: n.ID, Labels: n.Labels, Draining: n.Draining, SlotLimit: n.SlotLimit, Running: n.Running,
			CPUCores: n.CPUCores, MemoryMB: n.MemoryMB, CommittedCPU: n.CommittedCPU, CommittedMemMB: n.CommittedMemMB,
			LastAssignedAt: n.LastAssignedAt, CommittedGPUs: n.CommittedGPUs, DiskFreeMB: n.DiskFreeMB,
			MinFreeDiskMB: n.MinFreeDiskMB, DiskLowSince: n.DiskLowSince, EngineDownSince: n.EngineDownSince, Absent: n.Absent,
			Limits: placement.Limits{MaxCPU: n.Limits.MaxCPU, MaxMemoryMB: n.Limits.MaxMemoryMB, MaxPids: n.Limits.MaxPids,
				MaxTimeoutSeconds: n.Limits.MaxTimeoutSeconds, MaxOutputBytes: n.Limits.MaxOutputBytes,
				PermitEgress:            placement.ParseEgress(n.Limits.PermitEgress),
				AllowPrivilegedSidecars: n.Limits.AllowPrivilegedSidecars}}
		if len(n.GPUs) > 0 {
			c.GPUs = make([]placement.GPU, len(n.GPUs))
			for j, g := range n.GPUs {
				c.GPUs[j] = placement.GPU{Model: g.Model, MemoryMB: g.MemoryMB}
			}
		}
		fleet[i] = c
	}
	return fleet
}

// need is what a claimed task asks of a node, in placement's terms.
func need(n store.Need) placement.Need {
	return placement.Need{Labels: n.Labels, CPU: n.CPU, MemoryMB: n.MemoryMB, Pids: n.Pids, TimeoutSeconds: n.TimeoutSeconds,
		OutputLimitBytes: n.OutputLimitBytes, AllowEgress: placement.ParseEgress(n.AllowEgress),
		PrivilegedSidecars: n.PrivilegedSidecars, GPUs: n.GPUs, GPUModel: n.GPUModel, GPUMemoryMB: n.GPUMemoryMB}
}

// PlaceOn is a pass's PlaceFunc on fleet: placement.Place picks each task's
// node, and the task is charged there at now, so the next task of the pass,
// and the next pass, see the node as it will be. The charge is made before
// the pass commits: a pass that fails leaves the fleet charged for
// placements that were never made, so the caller reads it again.
//
// A task that finds every node busy (placement.Busy) while other sharers'
// tasks were claimed with it waits for its fair share, and is told so
// (placement.FairShareReason) with its sharer's counts. One that no node
// could ever run is unschedulable (placement.Reason), which the store
// records with its reason.
func PlaceOn(fleet []*placement.Candidate, now time.Time) store.PlaceFunc {
	return func(t store.Claimed) store.Verdict {
		n := need(t.Need)
		i, why := placement.Place(n, fleet)
		if i < 0 {
			if t.Contended && why.Text == placement.Busy {
				why.Text = placement.FairShareReason(t.Sharer, t.Running, t.Queued)
			}
			return store.Verdict{Why: why.Text, Unschedulable: why.Unschedulable}
		}
		c := fleet[i]
		c.Charge(n, now)
		return store.Verdict{NodeID: c.ID}
	}
}
