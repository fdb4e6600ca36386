package executor

// The node's limits on one task: the defaults a spec that sets none runs
// under, the maxima no spec may exceed, and the user a task runs as.

import (
	"errors"
	"fmt"
	"time"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// MinMemoryMB is the smallest memory limit the Docker engine accepts for a
// container (6 MiB); a default below it would fail every task that takes it.
const MinMemoryMB = 6

// Limits are a node's bounds on each task (podium-agent --default-* and
// --max-*). Without them a task with no resources in its spec is unlimited,
// and one fork bomb or runaway allocation takes the whole node down with
// every other task on it. Zero is "none" in every field.
//
// Defaults apply to each container, the task's and each sidecar's, that the
// spec leaves without that limit. Maxima bound what one task may ask for,
// its sidecars' added as placement counts them (package
// coordinator/placement): the node reports them in its Hello so that the
// scheduler never sends it a task above them, and refuses one it is sent
// anyway as a last line of defence.
type Limits struct {
	DefaultCPU      float64
	DefaultMemoryMB int64
	DefaultPids     int64
	// DefaultTimeout stops a task whose spec has no timeout_seconds.
	DefaultTimeout time.Duration
	// DefaultUser is who a task whose spec names no user runs as: "UID",
	// "UID:GID" or a user name (taskspec.UserProblem). Empty leaves it to
	// the image. Sidecars always run as their image says: they are stock
	// services (databases, brokers) that change user themselves.
	DefaultUser string

	MaxCPU      float64
	MaxMemoryMB int64
	MaxPids     int64
	MaxTimeout  time.Duration

	// WorkspaceBytes bounds the disk one task may fill: its workspace, its
	// artifacts directory and inbox, and its container's own writable
	// layer. The agent measures them every WorkspaceCheck and stops a task
	// over the bound with the reason ReasonWorkspaceFull.
	WorkspaceBytes int64
	// WorkspaceCheck is how often a running task's disk use is measured;
	// 0 means DefaultWorkspaceCheck.
	WorkspaceCheck time.Duration
}

// check refuses limits that contradict each other and fills each default a
// maximum implies: with a maximum and no default, a task that sets nothing
// gets the maximum, never "unlimited".
func (l *Limits) check() error {
	var errs []error
	neg := func(name string, bad bool) {
		if bad {
			errs = append(errs, fmt.Errorf("%s is negative: give 0 (none) or more", name))
		}
	}
	neg("the default CPU", l.DefaultCPU < 0)
	neg("the default memory", l.DefaultMemoryMB < 0)
	neg("the default pids", l.DefaultPids < 0)
	neg("the default timeout", l.DefaultTimeout < 0)
	neg("the maximum CPU", l.MaxCPU < 0)
	neg("the maximum memory", l.MaxMemoryMB < 0)
	neg("the maximum pids", l.MaxPids < 0)
	neg("the maximum timeout", l.MaxTimeout < 0)
	neg("the workspace limit", l.WorkspaceBytes < 0)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if l.DefaultUser != "" {
		if p := taskspec.UserProblem(l.DefaultUser); p != "" {
			errs = append(errs, fmt.Errorf("the default user: %s", p))
		}
	}
	if l.DefaultMemoryMB > 0 && l.DefaultMemoryMB < MinMemoryMB {
		errs = append(errs, fmt.Errorf("the default memory of %d MiB is below the %d MiB the Docker engine accepts", l.DefaultMemoryMB, MinMemoryMB))
	}
	above := func(what string, def, most float64, unit string) {
		if most > 0 && def > most {
			errs = append(errs, fmt.Errorf("the default %s (%g%s) is above the maximum (%g%s): a task that sets none would get more than one may ask for",
				what, def, unit, most, unit))
		}
	}
	above("CPU", l.DefaultCPU, l.MaxCPU, " cores")
	above("memory", float64(l.DefaultMemoryMB), float64(l.MaxMemoryMB), " MiB")
	above("pids", float64(l.DefaultPids), float64(l.MaxPids), "")
	above("timeout", l.DefaultTimeout.Seconds(), l.MaxTimeout.Seconds(), " s")
	if l.MaxTimeout > 0 && l.MaxTimeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("the maximum timeout %s is not a whole number of seconds", l.MaxTimeout))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if l.DefaultCPU == 0 {
		l.DefaultCPU = l.MaxCPU
	}
	if l.DefaultMemoryMB == 0 {
		l.DefaultMemoryMB = l.MaxMemoryMB
	}
	if l.DefaultPids == 0 {
		l.DefaultPids = l.MaxPids
	}
	if l.DefaultTimeout == 0 {
		l.DefaultTimeout = l.MaxTimeout
	}
	if l.WorkspaceCheck <= 0 {
		l.WorkspaceCheck = DefaultWorkspaceCheck
	}
	return nil
}

// Limits returns the limits the executor runs tasks under, defaults filled
// in from the maxima.
func (e *Executor) Limits() Limits { return e.limits }

// TaskLimits is what the node reports of its maxima in Hello and heartbeats
// (Capacity.limits), for the scheduler to place by.
func (l Limits) TaskLimits() *podiumv1.TaskLimits {
	return &podiumv1.TaskLimits{
		MaxCpu:            l.MaxCPU,
		MaxMemoryMb:       l.MaxMemoryMB,
		MaxPids:           l.MaxPids,
		MaxTimeoutSeconds: int64(l.MaxTimeout / time.Second),
	}
}

// resources is what one container runs under: the spec's limits, and the
// node's default for each the spec leaves at 0.
func (l Limits) resources(res *podiumv1.Resources) (cpu float64, memoryMB, pids int64) {
	cpu, memoryMB, pids = res.GetCpu(), res.GetMemoryMb(), res.GetPids()
	if cpu <= 0 {
		cpu = l.DefaultCPU
	}
	if memoryMB <= 0 {
		memoryMB = l.DefaultMemoryMB
	}
	if pids <= 0 {
		pids = l.DefaultPids
	}
	return cpu, memoryMB, pids
}

// timeout is how long the task may run: its spec's timeout_seconds, else
// the node's default (0: no limit). A spec's timeout too large for a
// time.Duration (the coordinator refuses it; an old row might hold one) is
// no timeout rather than an overflow that would stop the task at once.
func (l Limits) timeout(spec *podiumv1.TaskSpec) (d time.Duration, isDefault bool) {
	s := spec.GetTimeoutSeconds()
	if s <= 0 {
		return l.DefaultTimeout, l.DefaultTimeout > 0
	}
	return taskspec.Seconds(s), false
}

// user is who the task's command runs as: the spec's user, else the node's
// default, else "" (the image's).
func (l Limits) user(spec *podiumv1.TaskSpec) string {
	if u := spec.GetUser(); u != "" {
		return u
	}
	return l.DefaultUser
}

// refusal says why the node will not run spec, or "" if it will: a limit
// above the node's maximum, counted as placement counts it. The scheduler
// does not send such a task to this node; a task that arrives anyway (a
// coordinator older than the limits, or the agent restarted with lower
// ones since the task was placed) fails with this reason instead of running
// above what the operator allowed.
func (l Limits) refusal(spec *podiumv1.TaskSpec) string {
	cpu, mem, pids := spec.GetResources().GetCpu(), spec.GetResources().GetMemoryMb(), spec.GetResources().GetPids()
	for _, sc := range spec.GetSidecars() {
		cpu += sc.GetResources().GetCpu()
		mem += sc.GetResources().GetMemoryMb()
		pids += sc.GetResources().GetPids()
	}
	const tail = "; the scheduler should have placed it elsewhere: submit it again, or ask for less"
	switch {
	case l.MaxMemoryMB > 0 && mem > l.MaxMemoryMB:
		return fmt.Sprintf("the task asks for %d MiB of memory with its sidecars and this node allows at most %d MiB for one task (podium-agent --max-memory)%s",
			mem, l.MaxMemoryMB, tail)
	case l.MaxCPU > 0 && cpu > l.MaxCPU+1e-9:
		return fmt.Sprintf("the task asks for %g CPU with its sidecars and this node allows at most %g for one task (podium-agent --max-cpu)%s",
			cpu, l.MaxCPU, tail)
	case l.MaxPids > 0 && pids > l.MaxPids:
		return fmt.Sprintf("the task asks for %d processes with its sidecars and this node allows at most %d for one task (podium-agent --max-pids)%s",
			pids, l.MaxPids, tail)
	case l.MaxTimeout > 0 && spec.GetTimeoutSeconds() > int64(l.MaxTimeout/time.Second):
		return fmt.Sprintf("the task's timeout of %d s is above this node's maximum of %s (podium-agent --max-timeout)%s",
			spec.GetTimeoutSeconds(), l.MaxTimeout, tail)
	}
	return ""
}
