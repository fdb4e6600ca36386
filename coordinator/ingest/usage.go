package ingest

import (
	"fmt"
	"log/slog"
	"math"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Bounds on the usage a node reports with an attempt's end (StatusChange.usage).
// The figures come from inside the task's container (its runner reads its
// cgroup), so a hostile task may have written them, and a broken or hostile
// agent may send anything: the agent bounds them by the container's limits,
// and the coordinator checks them again here, against what no machine can
// do, before they are stored. A figure that cannot be a measurement
// (negative, not a number, more than a year of wall time) is refused and
// stored as unknown; one that is more than the node can give (CPU time
// beyond wall time × its cores, memory beyond its memory) is cut to that.
// Either is logged, naming the node and the task, and never fails the
// event: the task's end is what matters and is stored either way.
const (
	// maxUsageSeconds bounds wall time: no attempt runs a year.
	maxUsageSeconds = 366 * 24 * 3600
	// maxUsageCores bounds the CPUs of a node that did not measure its own.
	maxUsageCores = 4096
	// maxUsageMemory bounds the peak memory of a node that did not measure
	// its own: 64 TiB.
	maxUsageMemory = 64 << 40
	// cpuSlack is what the CPU bound allows beyond wall × cores (the
	// quota is enforced per scheduling period; the cgroup counts from a
	// moment before the engine's start time).
	cpuSlackFactor  = 1.05
	cpuSlackSeconds = 0.5
)

// checkUsage bounds u in place, for a node with cores CPUs and memoryMB of
// memory (0: unmeasured), and returns what it refused or cut, one sentence
// each.
func checkUsage(u *podiumv1.Usage, cores float64, memoryMB int64) (problems []string) {
	if u == nil {
		return nil
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	if u.WallSeconds != nil {
		if w := *u.WallSeconds; bad(w) || w > maxUsageSeconds {
			problems = append(problems, fmt.Sprintf("wall time %v s is not a measurement (want 0 to %d s); stored as unknown", w, maxUsageSeconds))
			u.WallSeconds = nil
		}
	}
	if u.CpuSeconds != nil {
		c := *u.CpuSeconds
		capCores := cores
		if capCores <= 0 {
			capCores = maxUsageCores
		}
		wall := float64(maxUsageSeconds)
		if u.WallSeconds != nil {
			wall = *u.WallSeconds
		}
		limit := wall*capCores*cpuSlackFactor + cpuSlackSeconds
		switch {
		case bad(c):
			problems = append(problems, fmt.Sprintf("CPU time %v s is not a measurement; stored as unknown", c))
			u.CpuSeconds = nil
		case u.WallSeconds == nil && c > limit:
			problems = append(problems, fmt.Sprintf("CPU time %v s is more than any node can use in a year; stored as unknown", c))
			u.CpuSeconds = nil
		case c > limit:
			problems = append(problems, fmt.Sprintf("CPU time %.3f s is more than %.3f s of wall time on %g cores allow; stored %.3f s",
				c, wall, capCores, limit))
			u.CpuSeconds = &limit
		}
	}
	if u.PeakMemoryBytes != nil {
		p := *u.PeakMemoryBytes
		limit := int64(maxUsageMemory)
		if memoryMB > 0 && memoryMB < maxUsageMemory>>20 {
			limit = memoryMB << 20
		}
		switch {
		case p < 0 || p > maxUsageMemory:
			problems = append(problems, fmt.Sprintf("peak memory %d B is not a measurement (want 0 to %d B); stored as unknown", p, int64(maxUsageMemory)))
			u.PeakMemoryBytes = nil
		case p > limit:
			problems = append(problems, fmt.Sprintf("peak memory %d B is more than the node's %d MB; stored %d B", p, memoryMB, limit))
			u.PeakMemoryBytes = &limit
		}
	}
	// Output and artifact bytes are the coordinator's own count; a node's
	// figures are not taken.
	u.OutputBytes, u.ArtifactBytes = 0, 0
	return problems
}

// CheckEventUsage bounds the usage of every status change in events, a
// message from node nodeID (see checkUsage), logging what it refused or cut.
// machine is the node's CPUs and memory as it last reported them (0:
// unmeasured); it is asked only if a status change carries usage.
func CheckEventUsage(log *slog.Logger, nodeID string, machine func() (cores float64, memoryMB int64), events []*podiumv1.TaskEvent) {
	var cores float64
	var memoryMB int64
	looked := false
	for _, ev := range events {
		u := ev.GetStatus().GetUsage()
		if u == nil {
			continue
		}
		if !looked {
			cores, memoryMB = machine()
			looked = true
		}
		for _, p := range checkUsage(u, cores, memoryMB) {
			log.Warn("nodes: a task's usage report was bounded: "+p,
				"node", nodeID, "task", ev.GetTaskId(), "attempt", ev.GetAttempt())
		}
	}
}
