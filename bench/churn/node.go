package main

import (
	"sync/atomic"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fleet is the simulated nodes of one phase: benchkit.TaskFleet treats tasks
// as the agent does (accept, give back, cancel, re-send after a reconnect)
// and this plays an accepted task: RUNNING, the task's output in chunks over
// -run-time, SUCCEEDED (exit 0).
type fleet struct {
	*benchkit.TaskFleet
	cfg    config
	corpus *corpus
	// done is called once per task, when the coordinator has acknowledged
	// its terminal event: the submit window's token comes back.
	done func()

	ordinal  atomic.Int64 // tasks accepted so far: picks each task's output
	finished atomic.Int64
	outBytes atomic.Int64 // output bytes the coordinator acknowledged
	lastDone atomic.Int64 // UnixNano of the last finished task
}

func newFleet(url string, creds []benchkit.NodeCred, cfg config, c *corpus, done func()) *fleet {
	f := &fleet{cfg: cfg, corpus: c, done: done}
	f.TaskFleet = benchkit.NewTaskFleet(benchkit.FleetConfig{URL: url, Creds: creds, PerConn: cfg.perConn, Inflight: cfg.inflight,
		HelloTimeout: cfg.helloTimeout, Interval: 10 * time.Second}, cfg.maxTasks,
		benchkit.TaskHooks{Accepted: f.run, Acked: f.acked})
	return f
}

// acked counts a task finished once its terminal event is acknowledged. A
// task given back is assigned again later: not finished yet.
func (f *fleet) acked(_ benchkit.AttemptKey, _ bool, t *benchkit.SimTask, _ time.Time) {
	if t == nil || t.Last().GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_QUEUED {
		return
	}
	f.outBytes.Add(int64(t.Offset))
	f.finished.Add(1)
	f.lastDone.Store(time.Now().UnixNano())
	f.done()
}

// run plays one task after it is accepted: RUNNING after -start-delay, then
// its output in -chunk pieces spread over -run-time, then SUCCEEDED. Each
// step's timer is set by the one before, so the events are made in order
// however loaded the machine is.
func (f *fleet) run(n *benchkit.SimNode, k benchkit.AttemptKey) {
	header, body := f.corpus.output(f.ordinal.Add(1), k.Task, f.cfg.output)
	out := append(header, body...)
	var chunks [][]byte
	for len(out) > 0 {
		c := min(len(out), f.cfg.chunk)
		chunks = append(chunks, out[:c:c])
		out = out[c:]
	}
	gap := f.cfg.runTime / time.Duration(len(chunks)+1)
	var step func(int)
	step = func(j int) {
		if j < len(chunks) {
			n.Log(k, chunks[j], f.cfg.linger)
			time.AfterFunc(gap, func() { step(j + 1) })
			return
		}
		var zero int32
		n.Status(k, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero)
	}
	time.AfterFunc(f.cfg.startDelay, func() {
		n.Status(k, podiumv1.TaskState_TASK_STATE_RUNNING, nil)
		time.AfterFunc(gap, func() { step(0) })
	})
}
