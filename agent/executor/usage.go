package executor

// What an attempt used, reported with its terminal status: CPU time and peak
// memory from the runner's exit record, bounded above by what the engine says
// the container could use and below by what the engine's stats showed it use
// while it ran, and the wall time by the engine's own clock. Output
// and artifact bytes the coordinator counts itself as it stores them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
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
	// seen is what the engine's stats showed the container use while it
	// ran: the least it used.
	seen usageSeen
}

// usageSeen is the most the engine's stats showed a running container use:
// its CPU time and its memory (v1's max_usage, else the highest usage
// sampled). Zero is nothing seen.
type usageSeen struct {
	cpu    time.Duration
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
// exit code, and a task is untrusted code: so its figures are bounded by what the task
// could have used whatever it wrote: CPU time by wall time × the CPUs it was
// allowed, peak memory by its memory limit (a cgroup cannot pass its own
// limit). A figure past its bound is cut to it and one that cannot be a
// measurement (negative) is dropped as unknown; each says why in problems,
// which the caller logs. Nor can it claim less than the engine's stats showed
// it use while it ran (f.seen, sampled every Config.UsageSample): it can
// understate at most what it used since the last sample, and a record with
// no figures (a runner killed from outside) reports those samples instead.
func boundUsage(rec *runlog.Exit, f usageFacts) (u *podiumv1.Usage, problems []string) {
	u = &podiumv1.Usage{}
	if f.wall > 0 {
		w := f.wall.Seconds()
		u.WallSeconds = &w
	}
	defer func() { problems = append(problems, raiseToSeen(u, f.seen)...) }()
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

// raiseToSeen raises u's figures to what the engine saw the container use
// while it ran, which the task cannot touch: a task that writes smaller
// figures into its exit record, or none (a corrupt record), is reported with
// at least what the engine saw by its last sample. A figure the record did
// not give becomes the engine's, a lower bound, rather than unknown; one the
// record understated says so in problems.
func raiseToSeen(u *podiumv1.Usage, seen usageSeen) (problems []string) {
	if seen.cpu > 0 {
		s := seen.cpu.Seconds()
		switch {
		case u.CpuSeconds == nil:
			u.CpuSeconds = &s
		case *u.CpuSeconds < s:
			problems = append(problems, fmt.Sprintf("the exit record's CPU time %.3f s is less than the %.3f s the engine "+
				"measured while the task ran; reporting %.3f s", *u.CpuSeconds, s, s))
			u.CpuSeconds = &s
		}
	}
	if m := seen.memory; m > 0 {
		switch {
		case u.PeakMemoryBytes == nil:
			u.PeakMemoryBytes = &m
		case *u.PeakMemoryBytes < m:
			problems = append(problems, fmt.Sprintf("the exit record's peak memory %d B is less than the %d B the engine "+
				"measured while the task ran; reporting %d B", *u.PeakMemoryBytes, m, m))
			u.PeakMemoryBytes = &m
		}
	}
	return problems
}

// DefaultUsageSample is how often the engine's stats of a running task are
// read (Config.UsageSample): a one-shot stats call is a couple of cgroup
// reads for the engine, and a task can understate its figures by at most
// what it used since the last one.
const DefaultUsageSample = 10 * time.Second

// maxStatsBytes bounds the engine's answer to a stats call; it is a few KiB.
const maxStatsBytes = 1 << 20

// watchUsage samples the engine's stats of the running container id every
// usageSample, keeping the most it has seen it use, until the returned stop
// is called (more than once is fine), which returns that. Reading the
// engine's figures at the end is not possible: the container's cgroup goes
// with its last process (see runner.readUsage), so these samples are only a
// floor under what the runner reports.
func (r *run) watchUsage(ctx context.Context, id string) (stop func() usageSeen) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		seen usageSeen
		wg   sync.WaitGroup
		once sync.Once
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.e.usageSample)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s, ok := r.sampleUsage(ctx, id)
			if !ok {
				continue
			}
			mu.Lock()
			seen.cpu, seen.memory = max(seen.cpu, s.cpu), max(seen.memory, s.memory)
			mu.Unlock()
		}
	}()
	return func() usageSeen {
		once.Do(func() { cancel(); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// sampleUsage reads the engine's stats of a running container once.
func (r *run) sampleUsage(ctx context.Context, id string) (usageSeen, bool) {
	sctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	res, err := r.e.docker.ContainerStatsOneShot(sctx, id)
	if err != nil {
		return usageSeen{}, false
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(res.Body, maxStatsBytes)).Decode(&st); err != nil {
		return usageSeen{}, false
	}
	m := max(st.MemoryStats.MaxUsage, st.MemoryStats.Usage)
	return usageSeen{cpu: time.Duration(min(st.CPUStats.CPUUsage.TotalUsage, math.MaxInt64)),
		memory: int64(min(m, math.MaxInt64))}, true
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
	f := r.e.usageFactsOf(info)
	f.seen = r.seen
	u, problems := boundUsage(exitRec, f)
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
