package executor

// What a run tells the coordinator: its events and notes, and the terminal
// status made from how the task ended.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/agent/runner"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// emitLocked sends one event; emitMu must be held.
func (r *run) emitLocked(ev *podiumv1.TaskEvent, cur *attempt.Cursor) {
	ev.TaskId = r.key.TaskID
	ev.Attempt = r.key.Attempt
	ev.Time = now()
	r.redactEventLocked(ev)
	r.emitFn(ev, cur)
	if s := ev.GetSeq(); s > 0 {
		r.lastSeq.Store(s)
	}
}

// emitStatus sends a status change; started marks the cursor as past the
// container's start, which is what RUNNING means.
func (r *run) emitStatus(s *podiumv1.StatusChange, started bool) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	var cur *attempt.Cursor
	if started {
		r.cur.Started = true
		cur = r.cur.Clone()
	}
	r.emitLocked(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: s}}, cur)
}

func (r *run) note(format string, args ...any) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	text := strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD")
	r.emitLocked(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: text}}}, nil)
}

func (r *run) cancelStatus(exit *int32) *podiumv1.StatusChange {
	return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_CANCELLED, Reason: r.cancelReason, ExitCode: exit}
}

func failed(format string, args ...any) *podiumv1.StatusChange {
	return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED,
		Reason: withFDAdvice(strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD"))}
}

func (r *run) reportTailError(err error) {
	if err == nil {
		return
	}
	r.log.Warn("reading the task's runner log failed", "err", err)
	r.note("output may be incomplete: the task's output log could not be read to its end (%v)", err)
}

// compose turns how the task ended into its terminal status. The runner's
// exit record is the first source: it has the exact signal and the OOM count
// of the container's cgroup. The engine's record is the fallback for a runner
// that was killed before it could write (SIGKILL after the grace period).
// id is the container, nil when it is gone already.
//
// The status carries the attempt's usage (usage.go), read from the exit
// record and the container as the engine last described it.
func (r *run) compose(ctx context.Context, why outcome, exitRec *runlog.Exit, id *string, waitMsg string) *podiumv1.StatusChange {
	var info *container.InspectResponse
	st := r.composeStatus(ctx, why, exitRec, id, waitMsg, &info)
	st.Usage = r.usage(exitRec, info)
	return st
}

// composeStatus is compose without the usage; it leaves in seen the
// container as it last inspected it, nil if it could not.
func (r *run) composeStatus(ctx context.Context, why outcome, exitRec *runlog.Exit, id *string, waitMsg string,
	seen **container.InspectResponse) *podiumv1.StatusChange {
	var code *int32
	var sig int32
	oom, pidsLimited := false, false
	if exitRec != nil {
		c := int32(exitRec.Code)
		code, sig, oom, pidsLimited = &c, int32(exitRec.Signal), exitRec.OOMKills > 0, exitRec.PidsRefused > 0
	}
	_, memLimit, pidsLimit := r.e.limits.resources(r.spec.GetResources())
	memLimited := memLimit > 0
	if id != nil {
		info, err := r.inspect(ctx, *id)
		if err == nil {
			*seen = &info
		}
		if err == nil && info.State != nil {
			if code == nil && !info.State.Running {
				c := int32(info.State.ExitCode)
				code, sig = &c, signalOf(&c)
			}
			oom = oom || info.State.OOMKilled
		}
		if !oom && exitRec == nil && memLimited && sig == 9 && why == outcomeExited {
			// The engine learns about an OOM kill from an event of its own
			// that can land just after the exit: a SIGKILLed task with a
			// memory limit is worth asking about again for a moment.
			for i := 0; i < 10 && !oom; i++ {
				time.Sleep(100 * time.Millisecond)
				if info, err := r.inspect(ctx, *id); err == nil && info.State != nil {
					oom = info.State.OOMKilled
					*seen = &info
				}
			}
		}
	}
	switch why {
	case outcomeCancel:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_CANCELLED, Reason: r.cancelReason, ExitCode: code, Signal: sig}
	case outcomeTimeout:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: ReasonTimeout, ExitCode: code, Signal: sig}
	case outcomeEngine:
		// No exit code or signal: they are the engine's doing, and a
		// client takes a failure without them for Podium's (podium run
		// exits 125). The reason keeps them.
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: engineStopped(code, sig)}
	case outcomeDiskFull:
		reason := r.stopReason
		if reason == "" {
			reason = ReasonWorkspaceFull
		}
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: reason, ExitCode: code, Signal: sig}
	}
	if exitRec != nil && exitRec.DiskFull || exitRec == nil && code != nil && *code == runner.ExitDiskFull && sig == 0 {
		reason := fmt.Sprintf("%s: the task's output found no room on the node's disk (%s) for %s, so the task was stopped; "+
			"free space there, or give podium-agent a longer --disk-full-after", ReasonNodeDiskFull, r.e.tasksDir, r.e.diskFullAfter)
		r.note("%s. The output before it is kept; what the task printed after it is lost.", reason)
		// No exit code: the node failed, not the task (podium run exits
		// 125), and the code is the runner's, not the task's.
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: reason}
	}
	if exitRec != nil && exitRec.Fenced {
		reason := attempt.RunnerFenced + " because the agent's lease on it ran out " +
			"(the agent hung, or reached no coordinator replica, for as long as the control plane takes to declare the node offline); " +
			"the task has retry_on_node_loss, so the control plane runs it again elsewhere"
		r.note("%s", reason)
		// No exit code: the node failed, not the task.
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: reason}
	}
	if code == nil {
		if waitMsg == "" {
			waitMsg = "no exit status was recorded"
		}
		return failed("lost track of the container: %s (check the Docker engine on this node)", waitMsg)
	}
	st := &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, ExitCode: code, Signal: sig}
	switch {
	case oom && memLimited:
		st.Reason = fmt.Sprintf("%s: the task used more than its memory limit of %d MB%s and the kernel killed it; "+
			"raise resources.memory_mb or make the task use less", ReasonOOM, memLimit, r.defaultNote(r.spec.GetResources().GetMemoryMb(), "memory"))
	case oom:
		st.Reason = ReasonOOM + ": the node ran out of memory and the kernel killed the task"
	case pidsLimited && (*code != 0 || sig != 0):
		limit := exitRec.PidsLimit
		if limit <= 0 {
			limit = pidsLimit
		}
		st.Reason = fmt.Sprintf("%s: the task tried to run more than %d processes and threads at once%s, and was stopped; "+
			"raise resources.pids if it needs more, or look for a fork loop", ReasonPidsLimit, limit, r.defaultNote(r.spec.GetResources().GetPids(), "pids"))
	case exitRec != nil && exitRec.Error != "":
		st.Reason = strings.TrimPrefix(exitRec.Error, "podium-runner: ")
	case *code == 0 && sig == 0:
		st.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	case sig > 0:
		st.Reason = fmt.Sprintf("killed by signal %d", sig)
	default:
		st.Reason = fmt.Sprintf("exit code %d", *code)
	}
	return st
}

// defaultNote says, for a reason, that a limit was the node's default
// because the spec set none (specValue 0).
func (r *run) defaultNote(specValue int64, flag string) string {
	if specValue > 0 {
		return ""
	}
	return " (this node's default, podium-agent --default-" + flag + "; the spec sets none)"
}

// signalOf reads a signal out of a shell-style exit status: 128+N means the
// process was killed by signal N.
func signalOf(code *int32) int32 {
	if code != nil && *code > 128 && *code < 128+65 {
		return *code - 128
	}
	return 0
}
