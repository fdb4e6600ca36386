package executor

// What an attempt used, reported with its terminal status: CPU time and peak
// memory from the runner's exit record, bounded by what the engine says the
// container could use, and the wall time by the engine's own clock. Output
// and artifact bytes the coordinator counts itself as it stores them.

import (
	"fmt"
	"math"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// usageFacts are what the agent knows of a container from the engine, which
// the task cannot touch. Zero is unknown in every field.
type usageFacts struct {
	// wall is how long the container ran: the engine's FinishedAt less its
	// StartedAt.
	wall time.Duration
	// cpus is how many CPUs the container could use: its limit, else the
	// engine's machine's.
	cpus float64
	// memory is the most memory, in bytes, the container could hold: its
	// limit, else the engine's machine's.
	memory int64
}

// cpuSlack is what the CPU bound allows beyond wall time × CPUs: the CFS
// quota is enforced per period (100 ms), and the cgroup counts its processes
// from their creation, a moment before the engine's StartedAt.
const (
	cpuSlackFactor  = 1.05
	cpuSlackSeconds = 0.5
)

// boundUsage makes the usage an attempt reports from the runner's exit record
// (nil: none was written) and the engine's facts.
//
// The exit record sits in a file the task can write, as it can write its own
// exit code (DESIGN.md §10): so its figures are bounded by what the task
// could have used whatever it wrote: CPU time by wall time × the CPUs it was
// allowed, peak memory by its memory limit (a cgroup cannot pass its own
// limit). A figure past its bound is cut to it and one that cannot be a
// measurement (negative) is dropped as unknown; each says why in problems,
// which the caller logs. A task can still understate what it used — the
// figures are its own cgroup's as its PID 1 read them — but not claim more
// than its limits let it use.
func boundUsage(rec *runlog.Exit, f usageFacts) (u *podiumv1.Usage, problems []string) {
	u = &podiumv1.Usage{}
	if f.wall > 0 {
		w := f.wall.Seconds()
		u.WallSeconds = &w
	}
	if rec == nil {
		return u, nil
	}
	if c := rec.CPUMicros; c != nil {
		cpu := float64(*c) / 1e6
		switch {
		case *c < 0:
			problems = append(problems, fmt.Sprintf("the exit record's CPU time %d µs is negative; reporting it as unknown", *c))
		case u.WallSeconds != nil && f.cpus > 0 && cpu > *u.WallSeconds*f.cpus*cpuSlackFactor+cpuSlackSeconds:
			limit := *u.WallSeconds*f.cpus*cpuSlackFactor + cpuSlackSeconds
			problems = append(problems, fmt.Sprintf("the exit record's CPU time %.3f s is more than %.3f s of wall time "+
				"on %g CPUs allow; reporting %.3f s", cpu, *u.WallSeconds, f.cpus, limit))
			u.CpuSeconds = &limit
		default:
			u.CpuSeconds = &cpu
		}
	}
	if p := rec.PeakMemory; p != nil {
		peak := *p
		switch {
		case peak < 0:
			problems = append(problems, fmt.Sprintf("the exit record's peak memory %d B is negative; reporting it as unknown", peak))
		case f.memory > 0 && peak > f.memory:
			problems = append(problems, fmt.Sprintf("the exit record's peak memory %d B is more than the container's "+
				"limit of %d B; reporting the limit", peak, f.memory))
			u.PeakMemoryBytes = &f.memory
		default:
			u.PeakMemoryBytes = &peak
		}
	}
	return u, problems
}

// usageFactsOf reads the facts from an inspected container (nil: it could
// not be inspected), with the engine's machine's CPUs and memory for a
// container without limits.
func (e *Executor) usageFactsOf(info *container.InspectResponse) usageFacts {
	var f usageFacts
	if info == nil || info.ContainerJSONBase == nil {
		return f
	}
	if st := info.State; st != nil {
		start, err1 := time.Parse(time.RFC3339Nano, st.StartedAt)
		end, err2 := time.Parse(time.RFC3339Nano, st.FinishedAt)
		if err1 == nil && err2 == nil && !start.IsZero() && start.Year() > 1 && end.After(start) {
			f.wall = end.Sub(start)
		}
	}
	if h := info.HostConfig; h != nil {
		switch {
		case h.NanoCPUs > 0:
			f.cpus = float64(h.NanoCPUs) / 1e9
		case h.CPUQuota > 0 && h.CPUPeriod > 0:
			f.cpus = float64(h.CPUQuota) / float64(h.CPUPeriod)
		}
		f.memory = h.Memory
	}
	if f.cpus <= 0 {
		f.cpus = float64(e.engineCPUs.Load())
	}
	if f.memory <= 0 {
		f.memory = e.engineMemory.Load()
	}
	if math.IsNaN(f.cpus) || math.IsInf(f.cpus, 0) {
		f.cpus = 0
	}
	return f
}

// usage is the attempt's usage for its terminal status, its problems logged.
func (r *run) usage(exitRec *runlog.Exit, info *container.InspectResponse) *podiumv1.Usage {
	u, problems := boundUsage(exitRec, r.e.usageFactsOf(info))
	for _, p := range problems {
		r.log.Warn("the task's usage figures were bounded: " + p)
	}
	return u
}

// known is a usage figure for a log line: its value, or "unknown".
func known[T any](p *T) any {
	if p == nil {
		return "unknown"
	}
	return *p
}
