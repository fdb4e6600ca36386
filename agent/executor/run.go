package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// run is one task attempt from acceptance to its terminal status.
type run struct {
	e      *Executor
	key    Key
	assign *podiumv1.Assign
	emitFn Emit
	log    *slog.Logger

	// prepCtx covers everything before the container starts (pull, create,
	// attach, start). Cancel ends it, so a cancel during a long image pull
	// does not wait for the pull.
	prepCtx    context.Context
	prepCancel context.CancelFunc

	once         sync.Once
	cancelled    chan struct{} // closed by the first cancel
	cancelReason string        // written before cancelled is closed
	cancelGrace  time.Duration

	done chan struct{}
}

// outcome is why a started container stopped, when it was not by itself.
type outcome int

const (
	outcomeExited   outcome = iota // the task's own process ended
	outcomeCancel                  // Cancel asked for it
	outcomeTimeout                 // timeout_seconds elapsed
	outcomeShutdown                // the agent is stopping
)

func (r *run) cancel(reason string, grace time.Duration) {
	r.once.Do(func() {
		if reason == "" {
			reason = "cancelled"
		}
		r.cancelReason = reason
		r.cancelGrace = grace
		close(r.cancelled)
		r.prepCancel()
		r.log.Info("cancel requested", "reason", reason, "grace", grace)
	})
}

func (r *run) isCancelled() bool {
	select {
	case <-r.cancelled:
		return true
	default:
		return false
	}
}

func (r *run) emit(ev *podiumv1.TaskEvent) {
	ev.TaskId = r.key.TaskID
	ev.Attempt = r.key.Attempt
	ev.Time = now()
	r.emitFn(ev)
}

func (r *run) emitStatus(s *podiumv1.StatusChange) {
	r.emit(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: s}})
}

func (r *run) note(format string, args ...any) {
	r.emit(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: fmt.Sprintf(format, args...)}}})
}

func (r *run) cancelStatus(exit *int32) *podiumv1.StatusChange {
	return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_CANCELLED, Reason: r.cancelReason, ExitCode: exit}
}

func failed(format string, args ...any) *podiumv1.StatusChange {
	return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: fmt.Sprintf(format, args...)}
}

// apiCtx is a bounded context for one engine call that must happen even when
// the run's own context has ended: stopping and removing a container is
// exactly what shutdown needs to do.
func (r *run) apiCtx(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), d)
}

// execute runs the attempt and returns its terminal status, or nil when the
// agent is shutting down (see Executor.Start for why nothing is reported
// then). Every path that created a container removes it before returning.
func (r *run) execute(ctx context.Context) *podiumv1.StatusChange {
	spec := r.assign.GetSpec()
	if spec.GetImage() == "" {
		return failed("the task spec names no image: submit it again with an image")
	}

	if st := r.ensureImage(ctx, spec.GetImage()); st != nil {
		return st
	}
	if r.isCancelled() {
		return r.cancelStatus(nil)
	}
	if ctx.Err() != nil {
		return nil
	}

	id, st := r.create(ctx, spec)
	if st != nil {
		return st
	}
	defer r.remove(ctx, id)

	if r.isCancelled() {
		return r.cancelStatus(nil)
	}
	return r.runContainer(ctx, id, spec)
}

// ensureImage makes sure the image is in the engine, pulling it when not.
// Images already present are used as they are: a node that re-pulled a mutable
// tag before every task would make tasks slower and results less repeatable.
func (r *run) ensureImage(ctx context.Context, ref string) *podiumv1.StatusChange {
	ictx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
	_, err := r.e.docker.ImageInspect(ictx, ref)
	cancel()
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		if r.isCancelled() {
			return r.cancelStatus(nil)
		}
		if ctx.Err() != nil {
			return nil
		}
		return failed("image %q could not be inspected: %v (is the Docker engine on this node running?)", ref, err)
	}

	r.note("pulling %s", ref)
	r.log.Info("pulling image", "image", ref)
	if err := r.pull(r.prepCtx, ref); err != nil {
		if r.isCancelled() {
			return r.cancelStatus(nil)
		}
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("image pull failed", "image", ref, "err", err)
		return failed("image %q could not be pulled: %v", ref, err)
	}
	r.note("pulled %s", ref)
	r.log.Info("pulled image", "image", ref)
	return nil
}

// pull pulls ref and reads the engine's progress stream to its end. The
// stream has to be drained: the pull is only finished when it ends, and a
// failure half-way (a missing layer, a refused blob) arrives in it as an error
// message, not as an error of the call.
func (r *run) pull(ctx context.Context, ref string) error {
	rc, err := r.e.docker.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading pull progress: %w", err)
		}
		if m.Error != nil {
			return m.Error
		}
	}
}

// containerConfig turns the task spec into the engine's container and host
// configuration.
func (r *run) containerConfig(spec *podiumv1.TaskSpec) (*container.Config, *container.HostConfig) {
	env := make([]string, 0, len(spec.GetEnv()))
	for k, v := range spec.GetEnv() {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)

	cfg := &container.Config{
		Image:      spec.GetImage(),
		Env:        env,
		WorkingDir: spec.GetWorkingDir(),
		Labels: map[string]string{
			LabelTask:    r.key.TaskID,
			LabelAttempt: strconv.Itoa(int(r.key.Attempt)),
			LabelNode:    r.e.nodeID,
		},
		AttachStdout: true,
		AttachStderr: true,
	}
	if cmd := spec.GetCommand(); len(cmd) > 0 {
		// The command replaces the entrypoint as well as the cmd. An image
		// whose entrypoint is a wrapper (`docker-entrypoint.sh "$@"`) would
		// otherwise run the user's command as arguments of something else.
		cfg.Entrypoint = []string{cmd[0]}
		cfg.Cmd = append([]string{}, cmd[1:]...)
	}

	init := true
	res := spec.GetResources()
	host := &container.HostConfig{
		// Init puts a minimal init (docker-init) at PID 1 that forwards
		// signals and reaps orphans. Without it the task's own process is
		// PID 1, which the kernel shields from SIGTERM unless it installs a
		// handler, so every cancel would wait out the whole grace period.
		// The runner will take this job over.
		Init:        &init,
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		Privileged:  false,
		// The agent reads output through attach and keeps it itself; the
		// engine keeping a second copy on disk would only fill the disk.
		LogConfig: container.LogConfig{Type: "none"},
	}
	if cpu := res.GetCpu(); cpu > 0 {
		host.NanoCPUs = int64(cpu * 1e9)
	}
	if mb := res.GetMemoryMb(); mb > 0 {
		// Swap equal to memory means no swap at all, so a task over its limit
		// is OOM-killed (and reported as such) instead of thrashing the node.
		host.Memory = mb << 20
		host.MemorySwap = mb << 20
	}
	if pids := res.GetPids(); pids > 0 {
		host.PidsLimit = &pids
	}
	return cfg, host
}

// create creates the container. A container of the same name can only be a
// leftover of this very attempt (an earlier agent process crashed after
// creating it), so it is removed and the create retried once.
func (r *run) create(ctx context.Context, spec *podiumv1.TaskSpec) (string, *podiumv1.StatusChange) {
	cfg, host := r.containerConfig(spec)
	name := ContainerName(r.key)
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		resp, err := r.e.docker.ContainerCreate(cctx, cfg, host, nil, nil, name)
		cancel()
		if err == nil {
			for _, w := range resp.Warnings {
				r.log.Warn("engine warning while creating container", "warning", w)
			}
			r.log.Debug("container created", "container", shortID(resp.ID), "name", name)
			return resp.ID, nil
		}
		if r.isCancelled() {
			return "", r.cancelStatus(nil)
		}
		if ctx.Err() != nil {
			return "", nil
		}
		if cerrdefs.IsConflict(err) && try == 0 {
			r.log.Warn("removing a stale container of the same attempt", "name", name)
			rctx, cancel := r.apiCtx(ctx, apiTimeout)
			rerr := r.e.docker.ContainerRemove(rctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			if rerr == nil || isNotFound(rerr) {
				continue
			}
		}
		return "", failed("container could not be created: %v (check the task's working directory and resource limits; "+
			"the node's Docker engine must be running and have room for another container)", err)
	}
}

// runContainer attaches, starts and watches the container until it ends, and
// turns how it ended into the terminal status.
func (r *run) runContainer(ctx context.Context, id string, spec *podiumv1.TaskSpec) *podiumv1.StatusChange {
	actx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
	out, err := r.e.output.Open(actx, id)
	cancel()
	if err != nil {
		if r.isCancelled() {
			return r.cancelStatus(nil)
		}
		if ctx.Err() != nil {
			return nil
		}
		return failed("container output could not be attached: %v (is the Docker engine on this node healthy?)", err)
	}
	defer out.Close()

	// Register the wait before starting: a task that exits at once must not
	// slip between the start and the wait. Its context is the run's, not the
	// preparation's, because a cancel must still see the exit.
	waitC, waitErrC := r.e.docker.ContainerWait(ctx, id, container.WaitConditionNextExit)

	if r.isCancelled() {
		return r.cancelStatus(nil)
	}
	sctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
	err = r.e.docker.ContainerStart(sctx, id, container.StartOptions{})
	cancel()
	if err != nil {
		if r.isCancelled() {
			return r.cancelStatus(nil)
		}
		if ctx.Err() != nil {
			return nil
		}
		return failed("container could not be started: %v (check that the command exists in image %q "+
			"and that its working directory is valid)", err, spec.GetImage())
	}
	r.log.Info("container started", "container", shortID(id))
	r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_RUNNING})

	// Output is copied only from here on, so no chunk can be emitted before
	// RUNNING; until then it waits in the attach connection.
	stdout := newLogWriter(podiumv1.LogStream_LOG_STREAM_STDOUT, r.emitChunk)
	stderr := newLogWriter(podiumv1.LogStream_LOG_STREAM_STDERR, r.emitChunk)
	copyDone := make(chan error, 1)
	go func() { copyDone <- out.Copy(stdout, stderr) }()

	var timeoutC <-chan time.Time
	if s := spec.GetTimeoutSeconds(); s > 0 {
		t := time.NewTimer(time.Duration(s) * time.Second)
		defer t.Stop()
		timeoutC = t.C
	}

	why := outcomeExited
	cancelC := r.cancelled
	var exit *container.WaitResponse
	var waitErr error
	for exit == nil && waitErr == nil {
		select {
		case res := <-waitC:
			exit = &res
		case err := <-waitErrC:
			if ctx.Err() != nil {
				// The wait's request ended because the agent is stopping.
				return r.shutdown(ctx, id, out, copyDone, stdout, stderr)
			}
			waitErr = err
		case <-cancelC:
			cancelC = nil // a closed channel would spin the loop
			if why == outcomeExited {
				why = outcomeCancel
				r.stop(ctx, id, r.e.graceFor(spec, r.cancelGrace))
			}
		case <-timeoutC:
			if why == outcomeExited {
				why = outcomeTimeout
				r.log.Info("task ran past its timeout; stopping it", "timeout_seconds", spec.GetTimeoutSeconds())
				r.stop(ctx, id, r.e.graceFor(spec, 0))
			}
		case <-ctx.Done():
			return r.shutdown(ctx, id, out, copyDone, stdout, stderr)
		}
	}

	// The container has exited; its output ends once the engine has flushed
	// it. Waiting for that is what makes the terminal status come after the
	// last byte.
	r.finishOutput(ctx, out, copyDone, stdout, stderr, 0)

	var code *int32
	if exit != nil && exit.Error == nil {
		c := int32(exit.StatusCode)
		code = &c
	}
	inspected, oom := r.inspect(ctx, id)
	if !oom && why == outcomeExited && spec.GetResources().GetMemoryMb() > 0 && signalOf(code) == 9 {
		// The engine learns about an OOM kill from an event of its own that
		// can land just after the exit: a SIGKILLed task with a memory
		// limit is worth asking about again for a moment.
		for i := 0; i < 10 && !oom; i++ {
			time.Sleep(100 * time.Millisecond)
			_, oom = r.inspect(ctx, id)
		}
	}
	if code == nil {
		// The wait failed (the engine restarted, say): the engine's record
		// of the container is the next best source of the exit code.
		code = inspected
	}

	switch why {
	case outcomeCancel:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_CANCELLED, Reason: r.cancelReason, ExitCode: code, Signal: signalOf(code)}
	case outcomeTimeout:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: ReasonTimeout, ExitCode: code, Signal: signalOf(code)}
	}
	if code == nil {
		msg := "unknown"
		if waitErr != nil {
			msg = waitErr.Error()
		} else if exit != nil && exit.Error != nil {
			msg = exit.Error.Message
		}
		return failed("lost track of the container: %s (check the Docker engine on this node)", msg)
	}
	st := &podiumv1.StatusChange{ExitCode: code, Signal: signalOf(code)}
	switch {
	case oom:
		st.State = podiumv1.TaskState_TASK_STATE_FAILED
		st.Reason = fmt.Sprintf("out of memory: the task used more than its memory limit of %d MB and was killed", spec.GetResources().GetMemoryMb())
	case *code == 0:
		st.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	case st.Signal > 0:
		st.State = podiumv1.TaskState_TASK_STATE_FAILED
		st.Reason = fmt.Sprintf("killed by signal %d", st.Signal)
	default:
		st.State = podiumv1.TaskState_TASK_STATE_FAILED
		st.Reason = fmt.Sprintf("exit code %d", *code)
	}
	return st
}

// signalOf reads a signal out of a shell-style exit status: 128+N means the
// process was killed by signal N.
func signalOf(code *int32) int32 {
	if code != nil && *code > 128 && *code < 128+65 {
		return *code - 128
	}
	return 0
}

func (r *run) emitChunk(c *podiumv1.LogChunk) {
	r.emit(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: c}})
}

// finishOutput waits for the copier to deliver the rest of the output, then
// flushes both writers. limit > 0 bounds the wait (shutdown); 0 waits until
// the output ends or the agent stops. A copier that ends with an error means
// output may be missing, which the task's log says rather than hides.
func (r *run) finishOutput(ctx context.Context, out Output, copyDone <-chan error, stdout, stderr *logWriter, limit time.Duration) {
	var limitC <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		limitC = t.C
	}
	ctxDone := ctx.Done()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-copyDone:
			waiting = false
		case <-ctxDone:
			// Shutdown while draining: give the copier the shutdown grace.
			ctxDone = nil
			if limitC == nil {
				t := time.NewTimer(r.e.shutdownGrace)
				defer t.Stop()
				limitC = t.C
			}
		case <-limitC:
			r.log.Warn("container output did not end in time; abandoning the rest")
			_ = out.Close()
			err = <-copyDone
			if err == nil {
				err = errors.New("output abandoned")
			}
			waiting = false
		}
	}
	stdout.Close()
	stderr.Close()
	if err != nil {
		r.log.Warn("reading container output failed", "err", err,
			"stdout_bytes", stdout.Len(), "stderr_bytes", stderr.Len())
		r.note("output may be incomplete: %v", err)
	}
}

// stop asks the engine to stop the container: SIGTERM, then SIGKILL after
// grace. The engine does the waiting, so the container is down when it
// returns. A failure is logged and otherwise ignored: the forced remove that
// follows kills the container anyway.
func (r *run) stop(ctx context.Context, id string, grace time.Duration) {
	secs := graceSeconds(grace)
	sctx, cancel := r.apiCtx(ctx, grace+apiTimeout)
	defer cancel()
	if err := r.e.docker.ContainerStop(sctx, id, container.StopOptions{Timeout: &secs}); err != nil && !isNotFound(err) {
		r.log.Warn("stopping container failed; it will be killed on removal", "container", shortID(id), "err", err)
	}
}

// remove deletes the container and its anonymous volumes. It runs on every
// path out of a run, shutdown included, so a clean run leaves nothing behind.
func (r *run) remove(ctx context.Context, id string) {
	rctx, cancel := r.apiCtx(ctx, apiTimeout)
	defer cancel()
	err := r.e.docker.ContainerRemove(rctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) {
		r.log.Error("removing the task's container failed; remove it by hand with `docker rm -f`",
			"container", shortID(id), "name", ContainerName(r.key), "err", err)
	}
}

// inspect reads the exit code and whether the kernel's OOM killer ended the
// container. Only the engine knows the latter: the exit status alone (137)
// looks the same as any SIGKILL.
func (r *run) inspect(ctx context.Context, id string) (exit *int32, oomKilled bool) {
	ictx, cancel := r.apiCtx(ctx, apiTimeout)
	defer cancel()
	info, err := r.e.docker.ContainerInspect(ictx, id)
	if err != nil || info.ContainerJSONBase == nil || info.State == nil {
		return nil, false
	}
	if !info.State.Running {
		c := int32(info.State.ExitCode)
		exit = &c
	}
	return exit, info.State.OOMKilled
}

// shutdown is the end of a run whose agent is stopping: stop the container
// with the shutdown grace, keep what output it wrote, and report nothing
// final (see Executor.Start).
func (r *run) shutdown(ctx context.Context, id string, out Output, copyDone <-chan error, stdout, stderr *logWriter) *podiumv1.StatusChange {
	r.log.Info("agent is shutting down; stopping task", "grace", r.e.shutdownGrace)
	r.note("the agent on this node is shutting down; the task was stopped")
	r.stop(ctx, id, r.e.shutdownGrace)
	r.finishOutput(ctx, out, copyDone, stdout, stderr, 10*time.Second)
	return nil
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
