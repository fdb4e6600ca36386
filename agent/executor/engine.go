package executor

// The Docker engine going away under a run: telling a task the engine
// stopped from one that failed by itself, waiting for the engine to be back,
// and tearing down an attempt once it is.
//
// `systemctl restart docker` (SIGTERM) makes the engine close its API
// listener, stop every container (their stop signal, SIGKILL after their stop
// timeout) and exit; the connections it had open keep being served until
// then, so the agent sees an ordinary exit by SIGTERM. An engine that crashes
// or is SIGKILLed leaves its containers running to their shims, the agent's
// wait on the container breaks, and the engine stops the containers when it
// starts again. Either way the task did nothing wrong: it fails with
// ReasonEngineRestarted and no exit code, which `podium run` reports as
// Podium's failure (125), not the task's. An engine with live-restore stops
// no container either way: its tasks run on, watched again once it answers,
// and one that ends meanwhile keeps its own status.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/docker/docker/client"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ReasonEngineRestarted starts the reason of a task whose container the node's
// Docker engine stopped because the engine itself stopped or restarted.
const ReasonEngineRestarted = "engine restarted"

// ReasonEngineDown starts the reason of an attempt the node gave back, or
// failed, because its Docker engine could not be reached as the attempt was
// prepared: the node's trouble, not the task's. A failed one has no exit
// code (`podium run` exits 125), and the coordinator retries it as it does
// an attempt lost with its node (retry_on_node_loss).
const ReasonEngineDown = "node engine down"

// engineUnreachable says whether err is the engine's client failing to
// reach the engine at all ("Cannot connect to the Docker daemon"), as
// opposed to an answer of the engine's.
func engineUnreachable(err error) bool { return client.IsErrConnectionFailed(err) }

// givenBack is the status that gives an attempt nothing of which has
// started back to the coordinator, which places it again without using an
// attempt: the node could not reach its engine (err).
func givenBack(what string, err error) *podiumv1.StatusChange {
	return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_QUEUED,
		Reason: fmt.Sprintf("%s: %s: %v (the node takes no new tasks until its engine answers)", ReasonEngineDown, what, err)}
}

// prepFailed is failed for a step of an attempt's preparation that failed
// with err: when err says the engine could not be reached, the reason
// starts with ReasonEngineDown, the node's failure rather than the task's.
func prepFailed(err error, format string, args ...any) *podiumv1.StatusChange {
	st := failed(format, args...)
	if engineUnreachable(err) {
		st.Reason = ReasonEngineDown + ": " + st.Reason
	}
	return st
}

// How long a fresh connection to the engine may take to answer a ping before
// the engine counts as gone. A healthy engine answers in milliseconds; a
// stopping one has closed its listener (refused at once) or, started by
// systemd's docker.socket, leaves the connection waiting in the socket's
// queue until the next engine has started, which takes longer than this:
// the old one must first stop its containers and exit, the new one start
// its containerd and restore its state. Short for that reason: the answer
// of the next engine must not count as the old one's.
const engineProbeTimeout = time.Second

// How often a run waiting for the engine asks whether it is back: from
// engineRetryMin, doubling, to engineRetryMax. Asking is one ping on a local
// socket.
const (
	engineRetryMin = 250 * time.Millisecond
	engineRetryMax = 5 * time.Second
)

// engineLearnWait bounds how long a task's end waits for an engine that never
// said whether it has live-restore on (it was going down when asked): past
// it the task is judged as if live-restore were off, as before.
const engineLearnWait = 30 * time.Second

// How long a teardown that failed while the engine answered waits before its
// next try: from teardownRetryMin, doubling, to teardownRetryMax. One that
// failed because the engine did not answer is tried again as soon as it
// answers.
const (
	teardownRetryMin = time.Second
	teardownRetryMax = time.Minute
)

// EngineAnswers reports whether the engine answers a ping on a new
// connection within engineProbeTimeout. The client's own connections will
// not do: it keeps them open, and a stopping engine still answers on those.
// The agent asks it before it takes a task, and for every heartbeat.
func (e *Executor) EngineAnswers(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
	defer cancel()
	conn, err := e.docker.Dialer()(pctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := pctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return false
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitEngine returns once the engine answers, asking again with backoff; it
// reports false if ctx ended first. An engine back is asked what it is
// (learnEngine): its configuration may have changed with its restart.
func (e *Executor) awaitEngine(ctx context.Context) bool {
	delay := engineRetryMin
	for !e.EngineAnswers(ctx) {
		if !sleep(ctx, delay) {
			return false
		}
		delay = min(2*delay, engineRetryMax)
	}
	if ctx.Err() != nil {
		return false
	}
	e.learnEngine(ctx)
	return true
}

// learnEngine asks the engine whether it has live-restore on, which decides
// whether its restarts stop containers at all. It is asked once, when a
// first task starts, and again whenever the engine is back after being
// away: while the engine is away, the answer it gave before is all there is.
func (e *Executor) learnEngine(ctx context.Context) {
	ictx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	info, err := e.docker.Info(ictx)
	if err != nil {
		e.log.Warn("could not ask the Docker engine whether it has live-restore on; taking it as off", "err", err)
		return
	}
	e.liveRestore.Store(info.LiveRestoreEnabled)
	e.engineCPUs.Store(int64(info.NCPU))
	e.engineMemory.Store(info.MemTotal)
	e.engineKnown.Store(true)
}

// sleep waits d; it reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// engineBack starts waiting for the engine in one of the run's helper
// goroutines; the channel is closed once the engine answers, and never if ctx
// ends first.
func (r *run) engineBack(ctx context.Context) <-chan struct{} {
	back := make(chan struct{})
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		if r.e.awaitEngine(ctx) {
			close(back)
		}
	}()
	return back
}

// teardownUntilDone tears the attempt down, and while that fails tries again:
// as soon as the engine answers if it did not, else after a backoff. A
// network or volume must not outlive its task because the engine was
// restarting when the task ended. It gives up only when ctx ends (the agent
// is stopping), leaving what is left to the next agent process's
// RemoveOrphans.
func (r *run) teardownUntilDone(ctx context.Context) {
	delay := teardownRetryMin
	for try := 1; ; try++ {
		err := r.teardown(ctx)
		if err == nil {
			if try > 1 {
				r.log.Info("the task's containers, network and volume are removed", "tries", try)
			}
			return
		}
		var waited bool
		if ctx.Err() == nil && !r.e.EngineAnswers(ctx) {
			r.log.Warn("tearing down the task failed and the Docker engine does not answer; trying again once it does",
				"try", try, "err", err)
			waited = r.e.awaitEngine(ctx)
		} else if ctx.Err() == nil {
			r.log.Warn("tearing down the task's containers, network or volume failed; trying again", "try", try,
				"retry_in", delay, "err", err)
			waited = sleep(ctx, delay)
			delay = min(2*delay, teardownRetryMax)
		}
		if !waited {
			r.log.Warn("agent is stopping before the task's containers, network or volume could be removed; "+
				"the next agent start removes them", "err", err)
			return
		}
	}
}

// engineStopped is the terminal status of a task whose container the engine
// stopped as it stopped or restarted. The exit code is left out so that
// `podium run` exits 125: the code is the engine's doing, not the task's
// answer. It is in the reason, for whoever reads it.
func engineStopped(code *int32, sig int32) string {
	how := ""
	switch {
	case sig > 0:
		how = " (its process was ended by signal " + strconv.Itoa(int(sig)) + ")"
	case code != nil:
		how = " (its process exited with code " + strconv.Itoa(int(*code)) + ")"
	}
	return ReasonEngineRestarted + ": the Docker engine on this node stopped or restarted while the task ran, and stopped the task's container" +
		how + "; the task did not fail by itself: run it again (its output so far is kept)"
}
