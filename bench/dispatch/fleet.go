package main

import (
	"sync"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// observer is told what the simulated nodes see; the measurement hangs off it.
type observer interface {
	assigned(task string, at time.Time)
	accepted(task string, at time.Time) // the coordinator acked the PROVISIONING event
	finished(task string, at time.Time) // the coordinator acked the SUCCEEDED event
}

// fleet is the simulated nodes as the agent behaves: benchkit.TaskFleet
// treats tasks as the agent does (accept, give back, cancel, re-send after a
// reconnect) and this plays an accepted task: RUNNING and SUCCEEDED (exit 0)
// so its slot comes free, or holds it accepted while the phase asks.
type fleet struct {
	*benchkit.TaskFleet
	cfg config
	obs observer

	// hold makes nodes accept their tasks (PROVISIONING) and keep them there
	// until release: a phase that measures dispatch alone, as the pgbench
	// reference does, without the rest of each task's life alongside.
	heldMu  sync.Mutex
	holding bool // guarded by heldMu, so no Assign slips past a release
	kept    []heldTask
}

type heldTask struct {
	n *benchkit.SimNode
	k benchkit.AttemptKey
}

func newFleet(url string, creds []benchkit.NodeCred, cfg config, obs observer) *fleet {
	f := &fleet{cfg: cfg, obs: obs}
	f.TaskFleet = benchkit.NewTaskFleet(cfg.FleetConfig(url, creds, 10*time.Second), cfg.maxTasks, benchkit.TaskHooks{
		Assigned: func(k benchkit.AttemptKey, at time.Time) { obs.assigned(k.Task, at) },
		Accepted: f.accepted,
		Acked: func(k benchkit.AttemptKey, first bool, done *benchkit.SimTask, at time.Time) {
			if first {
				obs.accepted(k.Task, at)
			}
			if done != nil {
				obs.finished(k.Task, at)
			}
		},
	})
	return f
}

// hold makes nodes keep the tasks they accept from now until release.
func (f *fleet) hold() {
	f.heldMu.Lock()
	f.holding = true
	f.heldMu.Unlock()
}

// release stops holding and lets every held task run its course: RUNNING and
// SUCCEEDED after the usual delays.
func (f *fleet) release() {
	f.heldMu.Lock()
	f.holding = false
	held := f.kept
	f.kept = nil
	f.heldMu.Unlock()
	for _, h := range held {
		f.runCourse(h.n, h.k)
	}
}

func (f *fleet) accepted(n *benchkit.SimNode, k benchkit.AttemptKey) {
	f.heldMu.Lock()
	if f.holding {
		f.kept = append(f.kept, heldTask{n, k})
		f.heldMu.Unlock()
		return
	}
	f.heldMu.Unlock()
	f.runCourse(n, k)
}

// runCourse reports a task RUNNING after startDelay and SUCCEEDED runTime
// later. The second timer is set by the first: two timers set at once can
// fire out of order on a loaded machine, and a node never reports a task
// succeeded before it reports it running.
func (f *fleet) runCourse(n *benchkit.SimNode, k benchkit.AttemptKey) {
	time.AfterFunc(f.cfg.startDelay, func() {
		n.Status(k, podiumv1.TaskState_TASK_STATE_RUNNING, nil)
		time.AfterFunc(f.cfg.runTime, func() {
			var zero int32
			n.Status(k, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero)
		})
	})
}
