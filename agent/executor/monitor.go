package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// monitor watches a started container until it ends, stopping it on a
// cancel or a timeout, and turns how it ended into the terminal status.
// intent is a stop a previous agent process began.
//
// Its phases: set up what it watches (the engine's wait, the timeout, the
// disk and usage watches), wait for the container to end (watch.wait), then
// read the runner log to its end and report (conclude).
func (r *run) monitor(ctx context.Context, id string, startedAt time.Time, intent *stopIntent) *podiumv1.StatusChange {
	taskTail := r.startTaskTail(ctx)
	w := &watch{r: r, id: id, stopSignal: "SIGTERM", why: outcomeExited, cancelC: r.cancelled, tailDone: taskTail.done}
	if info, err := r.inspect(ctx, id); err == nil && info.Config != nil && info.Config.StopSignal != "" {
		w.stopSignal = info.Config.StopSignal
	}

	// The wait's context is the run's, not the preparation's: a cancel
	// must still see the exit.
	w.waitC, w.waitErrC = r.e.docker.ContainerWait(ctx, id, container.WaitConditionNotRunning)

	w.timeout, w.defaultTimeout = r.e.limits.timeout(r.spec)
	if w.timeout > 0 {
		t := time.NewTimer(max(0, time.Until(startedAt.Add(w.timeout))))
		defer t.Stop()
		w.timeoutC = t.C
	}
	disk := r.watchDisk(ctx, id)
	defer disk.stop()
	stopUsage := r.watchUsage(ctx, id)
	defer stopUsage()
	stopNodeWatch := r.watchNodeDisk(ctx)
	defer stopNodeWatch()
	if disk != nil {
		w.diskC = disk.C
	}
	if intent != nil {
		// A previous agent process began stopping the task; finish the job.
		w.why, r.stopReason, w.killAt = intent.Why, intent.Reason, intent.KillAt
		w.killC = r.signalStop(ctx, id, w.stopSignal, intent.KillAt)
	}
	if !r.e.engineKnown.Load() {
		r.e.learnEngine(ctx)
	}
	var stopBack context.CancelFunc
	w.bctx, stopBack = context.WithCancel(ctx)
	defer stopBack()

	if !w.wait(ctx) {
		return r.leave()
	}

	// The container has exited: the runner log holds everything it wrote.
	// Reading it to the end before the status is what puts the terminal
	// status after the last byte. A note about the disk would come too late
	// to help, and after the one that ends the task.
	stopNodeWatch()
	r.seen = stopUsage()
	taskTail.finish()
	exitRec, tailErr := taskTail.wait()
	if ctx.Err() != nil {
		return r.leave()
	}
	r.reportTailError(tailErr)
	stopBack()
	return r.conclude(ctx, w, exitRec)
}

// watch is a started task container as monitor watches it: the channels it
// waits on (nil while there is nothing to wait for on one) and what it has
// learnt of the container so far.
type watch struct {
	r          *run
	id         string
	stopSignal string

	// waitC and waitErrC are the engine's wait on the container.
	waitC    <-chan container.WaitResponse
	waitErrC <-chan error
	// timeoutC fires when the task has run for timeout, defaultTimeout
	// saying that it is the node's default.
	timeout        time.Duration
	defaultTimeout bool
	timeoutC       <-chan time.Time
	diskC          <-chan string
	cancelC        <-chan struct{}
	// killC fires at the end of a stop's grace; killAt is when, of the
	// stop begun, if one was.
	killC  <-chan time.Time
	killAt time.Time
	// why is how the task is ending: outcomeExited until a stop begins.
	why outcome

	// engineLost says the engine went away while the container ran (the
	// wait on it broke) and the container has not been seen running
	// since. Meanwhile backC is closed when the engine answers again
	// (watched under bctx), and tailDoneC when the runner has written its
	// exit record (tailDone), which means the container has ended whether
	// or not the engine is back.
	engineLost       bool
	backC, tailDoneC <-chan struct{}
	bctx             context.Context
	tailDone         <-chan struct{}

	// exit is how the container exited, or waitErr why that cannot be
	// known.
	exit    *container.WaitResponse
	waitErr error
}

// wait waits until the container has ended, stopping it when it must. It
// returns false when ctx ended first: the run is left to the next agent
// process.
func (w *watch) wait(ctx context.Context) bool {
	r := w.r
	for w.exit == nil && w.waitErr == nil {
		select {
		case res := <-w.waitC:
			w.exit = &res
		case err := <-w.waitErrC:
			if ctx.Err() != nil {
				return false
			}
			r.log.Warn("lost the Docker engine while the task ran; waiting for it to answer again", "err", err)
			w.engineLost = true
			w.waitC, w.waitErrC = nil, nil
			w.backC, w.tailDoneC = r.engineBack(w.bctx), w.tailDone
		case <-w.backC:
			w.backC = nil
			if !w.engineIsBack(ctx) {
				return false
			}
		case <-w.tailDoneC:
			// The runner's last act is its exit record: the container
			// has ended while the engine was away.
			w.tailDoneC = nil
			w.exit = &container.WaitResponse{}
		case <-w.cancelC:
			w.cancelC = nil // a closed channel would spin the loop
			if w.why == outcomeExited {
				r.log.Info("stopping the task", "reason", r.cancelReason)
				w.beginStop(ctx, outcomeCancel, r.cancelReason, r.e.graceFor(r.spec, r.cancelGrace))
			}
		case <-w.timeoutC:
			w.timeoutC = nil
			if w.why == outcomeExited {
				r.log.Info("task ran past its timeout; stopping it", "timeout", w.timeout, "node_default", w.defaultTimeout)
				if w.defaultTimeout {
					r.note("the task ran longer than this node's default timeout of %s (its spec sets none; "+
						"podium-agent --default-timeout); stopping it. Give it a timeout of its own if it needs longer", w.timeout)
				}
				w.beginStop(ctx, outcomeTimeout, ReasonTimeout, r.e.graceFor(r.spec, 0))
			}
		case reason := <-w.diskC:
			w.diskC = nil
			if w.why == outcomeExited {
				r.log.Info("task is over its workspace limit; stopping it", "reason", reason)
				r.stopReason = reason
				// No grace: every second of it is more disk filled.
				w.beginStop(ctx, outcomeDiskFull, reason, 0)
			}
		case <-w.killC:
			w.killC = nil
			r.log.Info("the task did not stop within its grace period; killing it")
			r.kill(ctx, w.id)
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// beginStop begins stopping the task for o: it saves why, so that a later
// agent process finishes the stop, signals the container and arms the kill
// at the end of grace.
func (w *watch) beginStop(ctx context.Context, o outcome, reason string, grace time.Duration) {
	w.why = o
	in := stopIntent{Why: o, Reason: reason, KillAt: time.Now().Add(grace)}
	w.r.saveIntent(in)
	w.killAt = in.KillAt
	w.killC = w.r.signalStop(ctx, w.id, w.stopSignal, in.KillAt)
}

// engineIsBack looks at the container once the engine answers again after
// it was lost: still running, it is watched on; ended, its exit is taken. It
// returns false when ctx ended first.
func (w *watch) engineIsBack(ctx context.Context) bool {
	r := w.r
	info, err := r.inspect(ctx, w.id)
	switch {
	case err == nil && info.State != nil && info.State.Running:
		// A wait that broke with the engine still up, or an engine with
		// live-restore, whose containers survive it: a restarted engine
		// without it has stopped every container before it answers.
		r.log.Info("the Docker engine answers again and the task's container is still running; watching it on")
		w.engineLost, w.tailDoneC = false, nil
		w.waitC, w.waitErrC = r.e.docker.ContainerWait(ctx, w.id, container.WaitConditionNotRunning)
		if w.why != outcomeExited {
			// The stop begun while the engine was away reached nobody:
			// again, with what is left of its grace.
			w.killC = r.signalStop(ctx, w.id, w.stopSignal, w.killAt)
		}
	case err == nil && info.State != nil:
		w.exit = &container.WaitResponse{StatusCode: int64(info.State.ExitCode)}
	case err == nil:
		w.waitErr = errors.New("the Docker engine answers again, but without the state of the task's container")
	case ctx.Err() != nil:
		return false
	default:
		w.waitErr = fmt.Errorf("the Docker engine answers again, but not about the task's container: %w", err)
	}
	return true
}

// conclude turns how the container ended into the terminal status, once the
// runner log is read to its end (exitRec is its exit record, if any): it
// stops the sidecars, copies the workspace out and removes the containers.
func (r *run) conclude(ctx context.Context, w *watch, exitRec *runlog.Exit) *podiumv1.StatusChange {
	why, engineLost := w.why, w.engineLost
	if why == outcomeExited {
		engineLost = r.stoppedByEngine(ctx, engineLost, exitRec, w.exit)
		if engineLost {
			why = outcomeEngine
		}
	}
	r.stopSidecars(ctx)

	waitMsg := ""
	if w.waitErr != nil {
		waitMsg = w.waitErr.Error()
	} else if w.exit != nil && w.exit.Error != nil {
		waitMsg = w.exit.Error.Message
	}
	id := w.id
	st := r.compose(ctx, why, exitRec, &id, waitMsg)
	if !r.copyWorkspace(ctx, id) {
		return r.leave()
	}
	// The containers go now, before anyone hears the task ended; the network
	// and volume go after the terminal status (see main): removing a network
	// takes Docker ~170 ms, which a user waiting on `podium run` should not.
	r.removeContainers(ctx, id)
	r.teardownAfterStatus = true
	return st
}
