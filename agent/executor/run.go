package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The host directory of an attempt.
const (
	logFile     = "output.log" // the task's runner log
	inboxDir    = "inbox"      // mounted at inbox.ContainerDir
	sidecarsDir = "sidecars"   // <name>.log: the sidecars' runner logs
	// artifactsDir is mounted at artifacts.ContainerDir; what the task
	// leaves there is uploaded when it exits.
	artifactsDir = "artifacts"
	// stopFile records that the agent began stopping the task (cancel or
	// timeout) and why, so an agent that restarts half-way through a grace
	// period finishes the stop and reports the right outcome.
	stopFile = "stop.json"
)

// run is one task attempt from acceptance to its terminal status.
type run struct {
	// teardownAfterStatus is set by a body that removed the containers and
	// left the network and volume for after the terminal status.
	teardownAfterStatus bool

	e      *Executor
	key    Key
	assign *podiumv1.Assign
	spec   *podiumv1.TaskSpec
	emitFn Emit
	log    *slog.Logger
	dir    string // the attempt's host directory
	// prepErr is why the host directory could not be made, if it could not.
	prepErr error

	// prepCtx covers everything before the container starts (pull, create,
	// sidecars, start). Cancel ends it, so a cancel during a long image
	// pull does not wait for the pull.
	prepCtx    context.Context
	prepCancel context.CancelFunc

	once         sync.Once
	cancelled    chan struct{} // closed by the first cancel
	cancelReason string        // written before cancelled is closed
	cancelGrace  time.Duration

	// emitMu serialises the run's events and guards cur: an event and the
	// cursor stored with it must go out in the order the cursor advanced,
	// or a restart could resume from a cursor older than an event already
	// sent.
	emitMu sync.Mutex
	cur    Cursor
	// lastSeq is the seq the caller of Emit gave the newest event.
	lastSeq atomic.Uint64

	// bg counts the run's helper goroutines (log tails, readiness
	// checks); the run joins them before it ends.
	bg sync.WaitGroup

	// sidecarTails are the running tails of the sidecars' runner logs.
	sidecarTails map[string]*tail

	// sel is what the spec's artifacts globs select (the default when
	// selErr says they cannot be used, which validate refuses to run).
	sel    *selection
	selErr error
	// workspaceSkipped are the selected workspace files copyWorkspace did
	// not copy, and why, noted in the task's log with the other artifacts.
	workspaceSkipped []artifacts.Skipped

	done chan struct{}
}

// outcome is why a started container stopped, when it was not by itself.
type outcome string

const (
	outcomeExited  outcome = ""        // the task's own process ended
	outcomeCancel  outcome = "cancel"  // Cancel asked for it
	outcomeTimeout outcome = "timeout" // timeout_seconds elapsed
)

// stopIntent is the content of stopFile.
type stopIntent struct {
	Why    outcome   `json:"why"`
	Reason string    `json:"reason,omitempty"`
	KillAt time.Time `json:"kill_at"`
}

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

// interrupted says whether a failed step failed because the run was
// cancelled (the CANCELLED status to end with) or the agent is stopping (no
// status at all). Otherwise the step's own error is the story.
func (r *run) interrupted(ctx context.Context) (*podiumv1.StatusChange, bool) {
	if r.isCancelled() {
		return r.cancelStatus(nil), true
	}
	if ctx.Err() != nil {
		return nil, true
	}
	return nil, false
}

// emitLocked sends one event; emitMu must be held.
func (r *run) emitLocked(ev *podiumv1.TaskEvent, cur *Cursor) {
	ev.TaskId = r.key.TaskID
	ev.Attempt = r.key.Attempt
	ev.Time = now()
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
	var cur *Cursor
	if started {
		r.cur.Started = true
		cur = r.cur.clone()
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
		Reason: strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD")}
}

// apiCtx is a bounded context for one engine call that must happen even when
// the run's own context has ended: removing what a run created is exactly
// what it must still do when the agent stops during preparation.
func apiCtx(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), d)
}

// main runs body and reports its outcome. The run leaves the table before
// its terminal event goes out, so the slot is free by the time the
// coordinator hears the task ended; the host directory goes only after the
// terminal event is stored, because until then a restarted agent may need
// the runner log to finish the task, and after the artifacts' uploads, which
// read from it.
//
// Between the two come the artifacts: collected, and tried once each before
// the terminal status (at most artifactWait), so that the usual task's files
// are stored by the time anyone hears it ended. An agent that stops during
// that wait reports nothing: the next one resumes the attempt from its runner
// log and collects the files again.
func (r *run) main(ctx context.Context, body func(context.Context) *podiumv1.StatusChange) {
	defer r.e.wg.Done()
	defer close(r.done)
	defer r.prepCancel()
	final := body(ctx)
	// Whatever path main leaves by, the network and volume a finished body
	// left go before the executor counts this run as done, on a context the
	// agent's stopping does not cancel.
	defer func() {
		if r.teardownAfterStatus {
			r.teardown(context.WithoutCancel(ctx))
		}
	}()
	r.bg.Wait()
	r.e.mu.Lock()
	delete(r.e.runs, r.key)
	r.e.mu.Unlock()
	if final == nil {
		return
	}
	attrs := []any{"state", final.GetState().String(), "reason", final.GetReason()}
	if final.ExitCode != nil {
		attrs = append(attrs, "exit_code", final.GetExitCode())
	}
	r.log.Info("task finished", attrs...)
	job := r.uploadArtifacts(ctx)
	if job != nil {
		t := time.NewTimer(r.e.artifactWait)
		select {
		case <-job.Tried():
		case <-t.C:
			r.log.Info("artifacts are still uploading; reporting the task's status now and uploading on", "waited", r.e.artifactWait)
		case <-ctx.Done():
			t.Stop()
			r.log.Info("agent is stopping while the task's artifacts upload; the next agent process collects them again")
			<-job.Done()
			return
		}
		t.Stop()
	}
	r.emitStatus(final, false)
	if job != nil {
		job.Ended()
		select {
		case <-job.Done():
		case <-ctx.Done():
			// Pending uploads end with the agent; the next agent process
			// takes them over from their record (ResumeUploads) or, with
			// nothing left, removes the directory (RemoveOrphans).
			<-job.Done()
			return
		}
	}
	r.removeDir()
}

// uploadArtifacts collects what the task left in its artifacts directory,
// notes in the task's log what is skipped and why, and starts uploading the
// rest. It returns nil when there is nothing to wait for.
func (r *run) uploadArtifacts(ctx context.Context) artifacts.Job {
	files, skipped, err := r.collectArtifacts()
	if err != nil {
		r.log.Warn("could not read the task's artifacts directory", "err", err)
		r.note("artifacts: the task's artifacts directory could not be read on the node: %v", err)
		return nil
	}
	for _, s := range skipped {
		r.note("artifact %s skipped: %s", s.Name, s.Reason)
	}
	if len(files) == 0 {
		return nil
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	if r.e.uploader == nil {
		r.log.Info("the task left artifacts, but this executor uploads none", "files", len(files), "bytes", total)
		return nil
	}
	r.log.Info("uploading the task's artifacts", "files", len(files), "bytes", total, "skipped", len(skipped))
	return r.e.uploader.Upload(ctx, artifacts.Uploads{
		TaskID: r.key.TaskID, Attempt: r.key.Attempt, Files: files,
		Note:    func(text string) { r.note("%s", text) },
		Pending: r.e.pendingKeeper(r.key, r.dir, r.lastSeq.Load),
	})
}

// collectArtifacts lists the files to upload: those of the artifacts
// directory the spec selects, then those copyWorkspace copied out of the
// rest of the workspace, at most artifacts.MaxFiles in all. A workspace file
// whose name a file of the artifacts directory already has is skipped: the
// file the task put in the artifacts directory, or published, is the one it
// meant by that name.
func (r *run) collectArtifacts() ([]artifacts.File, []artifacts.Skipped, error) {
	dir := filepath.Join(r.dir, artifactsDir)
	var published map[string]bool
	if !r.sel.all {
		var err error
		if published, err = artifacts.Published(dir); err != nil {
			r.log.Warn("could not read the names the task published", "err", err)
			r.note("artifacts: the names of the files published with podium-runner artifact add could not be read (%v); "+
				"they are uploaded only if the spec's artifacts globs select them", err)
		}
	}
	files, skipped, err := artifacts.CollectWhere(dir, r.sel.inArtifactsDir(published))
	if err != nil {
		return nil, nil, err
	}
	skipped = append(skipped, r.workspaceSkipped...)
	if len(r.sel.reads) == 0 {
		return files, skipped, nil
	}
	copied, more, err := artifacts.Collect(filepath.Join(r.dir, workspaceDir))
	if err != nil {
		r.log.Warn("could not read the copy of the task's workspace", "err", err)
		r.note("artifacts: the files copied from the workspace could not be read on the node: %v", err)
	}
	skipped = append(skipped, more...)
	names := make(map[string]bool, len(files))
	for _, f := range files {
		names[f.Name] = true
	}
	for _, f := range copied {
		switch {
		case names[f.Name]:
			skipped = append(skipped, artifacts.Skipped{Name: f.Name,
				Reason: "a file of the same name in " + artifacts.ContainerDir + " is uploaded instead"})
		case len(files) >= artifacts.MaxFiles:
			skipped = append(skipped, artifacts.Skipped{Name: f.Name,
				Reason: fmt.Sprintf("a task uploads at most %d files", artifacts.MaxFiles)})
		default:
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, skipped, nil
}

func (r *run) removeDir() {
	if err := os.RemoveAll(r.dir); err != nil {
		r.log.Warn("could not remove the task's directory; the next agent start removes it", "dir", r.dir, "err", err)
	}
}

// execute runs a newly assigned attempt.
func (r *run) execute(ctx context.Context) *podiumv1.StatusChange {
	spec := r.spec
	if st := r.validate(); st != nil {
		return st
	}
	if r.prepErr != nil {
		return failed("the task's directory on the node could not be prepared: %v (check the agent's data directory and its free space)", r.prepErr)
	}
	img, st := r.ensureImage(ctx, spec.GetImage())
	if img == nil {
		r.removeDir()
		return st
	}
	argv, err := resolveArgv(spec.GetCommand(), img)
	if err != nil {
		r.removeDir()
		return failed("%v", err)
	}
	sidecars := make([]*sidecar, 0, len(spec.GetSidecars()))
	for _, sc := range spec.GetSidecars() {
		simg, st := r.ensureImage(ctx, sc.GetImage())
		if simg == nil {
			r.removeDir()
			return st
		}
		sargv, err := resolveArgv(sc.GetCommand(), simg)
		if err != nil {
			r.removeDir()
			return failed("sidecar %q: %v", sc.GetName(), err)
		}
		sidecars = append(sidecars, &sidecar{spec: sc, argv: sargv})
	}
	if st, stop := r.interrupted(ctx); stop {
		r.removeDir()
		return st
	}

	id, started, st := r.launch(ctx, argv, sidecars)
	if !started {
		r.stopSidecarTails(ctx)
		r.teardown(ctx)
		if st == nil {
			r.removeDir() // the agent is stopping; there is nothing to resume
		}
		return st
	}
	return r.monitor(ctx, id, time.Now(), nil)
}

// validate refuses what the node will not run, whatever the coordinator
// let through: capabilities beyond the allowed list, artifacts globs it
// cannot match, and sidecar names that cannot be host names on the task's
// network.
func (r *run) validate() *podiumv1.StatusChange {
	spec := r.spec
	if spec.GetImage() == "" {
		return failed("the task spec names no image: submit it again with an image")
	}
	if r.selErr != nil {
		return failed("the spec's artifacts globs cannot be used: %v", r.selErr)
	}
	for _, c := range spec.GetCapabilities() {
		if _, err := taskspec.NormalizeCapability(c); err != nil {
			return failed("capability refused: %v", err)
		}
	}
	seen := map[string]bool{}
	for _, sc := range spec.GetSidecars() {
		n := sc.GetName()
		if n == "" || n == taskspec.TaskHostName || seen[n] || !taskspec.IsDNSLabel(n) {
			return failed("sidecar name %q cannot be used: give each sidecar a distinct DNS label other than %q, e.g. db",
				n, taskspec.TaskHostName)
		}
		seen[n] = true
		if sc.GetImage() == "" {
			return failed("sidecar %q names no image", n)
		}
	}
	return nil
}

// prepareDir makes the attempt's host directory: the empty runner logs the
// containers' runners append to, the inbox and the artifacts directory.
func (r *run) prepareDir() error {
	if err := os.MkdirAll(filepath.Join(r.dir, sidecarsDir), 0o755); err != nil {
		return err
	}
	if err := runlog.Create(filepath.Join(r.dir, logFile)); err != nil {
		return err
	}
	for _, sc := range r.spec.GetSidecars() {
		if err := runlog.Create(r.sidecarLog(sc.GetName())); err != nil {
			return err
		}
	}
	if err := artifacts.Prepare(filepath.Join(r.dir, artifactsDir)); err != nil {
		return err
	}
	return inbox.Prepare(filepath.Join(r.dir, inboxDir))
}

func (r *run) sidecarLog(name string) string {
	return filepath.Join(r.dir, sidecarsDir, name+".log")
}

// resolveArgv is the command the runner starts: the task's own, which
// replaces the image's entrypoint and cmd, or else the image's entrypoint
// followed by its cmd — what `docker run IMAGE` would have run. The runner
// takes the container's entrypoint, so the agent has to work this out itself.
func resolveArgv(command []string, img *image.InspectResponse) ([]string, error) {
	if len(command) > 0 {
		return append([]string(nil), command...), nil
	}
	var argv []string
	if img.Config != nil {
		argv = append(argv, img.Config.Entrypoint...)
		argv = append(argv, img.Config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, errors.New("the image has neither an ENTRYPOINT nor a CMD and no command was given: give the command to run")
	}
	return argv, nil
}

// ensureImage makes sure the image is in the engine, pulling it when not,
// and returns what the engine knows of it. Images already present are used as
// they are: a node that re-pulled a mutable tag before every task would make
// tasks slower and results less repeatable. A nil image comes with the status
// to end with (nil when the agent is stopping).
func (r *run) ensureImage(ctx context.Context, ref string) (*image.InspectResponse, *podiumv1.StatusChange) {
	inspect := func() (image.InspectResponse, error) {
		ictx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		defer cancel()
		return r.e.docker.ImageInspect(ictx, ref)
	}
	img, err := inspect()
	if err == nil {
		return &img, nil
	}
	if !isNotFound(err) {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		return nil, failed("image %q could not be inspected: %v (is the Docker engine on this node running?)", ref, err)
	}

	r.note("pulling %s", ref)
	r.log.Info("pulling image", "image", ref)
	if err := r.pull(r.prepCtx, ref); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		r.log.Warn("image pull failed", "image", ref, "err", err)
		return nil, failed("image %q could not be pulled: %v", ref, err)
	}
	r.note("pulled %s", ref)
	r.log.Info("pulled image", "image", ref)
	img, err = inspect()
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		return nil, failed("image %q could not be inspected after it was pulled: %v", ref, err)
	}
	return &img, nil
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

// launch creates the network, the volume and the sidecars, waits for the
// sidecars, and creates and starts the task's container. started reports
// whether the container started; if not, st is the status to end with (nil:
// the agent is stopping) and the caller tears down.
func (r *run) launch(ctx context.Context, argv []string, sidecars []*sidecar) (id string, started bool, st *podiumv1.StatusChange) {
	if err := r.createNetwork(); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, failed("the task's network could not be created: %v (if the engine ran out of address pools, "+
			"give it more with default-address-pools in /etc/docker/daemon.json)", err)
	}
	if err := r.createVolume(); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, failed("the task's workspace volume could not be created: %v", err)
	}
	if st, ok := r.startSidecars(ctx, sidecars); !ok {
		return "", false, st
	}
	if st, stop := r.interrupted(ctx); stop {
		return "", false, st
	}
	id, err := r.createContainer(ctx, r.taskContainer(argv))
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, failed("the task's container could not be created: %v (check the task's working directory and resource limits; "+
			"the node's Docker engine must be running and have room for another container)", err)
	}
	if st, stop := r.interrupted(ctx); stop {
		return "", false, st
	}
	sctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
	err = r.e.docker.ContainerStart(sctx, id, container.StartOptions{})
	cancel()
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, failed("the task's container could not be started: %v (check that image %q runs on this machine)", err, r.spec.GetImage())
	}
	r.log.Info("container started", "container", shortID(id))
	r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_RUNNING}, true)
	return id, true, nil
}

// resume continues an attempt a previous agent process started. found is
// the task's container, nil when it is gone (it ended while no agent ran).
func (r *run) resume(ctx context.Context, found *container.InspectResponse) *podiumv1.StatusChange {
	intent := r.loadIntent()
	if intent != nil && intent.Why == outcomeCancel {
		// The cancel a previous agent process received holds for this one.
		r.cancel(intent.Reason, 0)
	}
	for _, sc := range r.spec.GetSidecars() {
		if _, err := os.Stat(r.sidecarLog(sc.GetName())); err == nil {
			r.startSidecarTail(ctx, sc.GetName())
		}
	}
	if found == nil {
		r.note("the task ended while the agent on its node was not running; its output and exit status were kept")
		t := r.startTaskTail(ctx)
		t.finish()
		exit, err := t.wait()
		if ctx.Err() != nil {
			return r.leave()
		}
		r.reportTailError(err)
		r.stopSidecars(ctx)
		why := outcomeExited
		if intent != nil {
			why = intent.Why
		}
		st := r.compose(ctx, why, exit, nil, "")
		r.checkWorkspaceCopied()
		r.teardown(ctx)
		return st
	}
	if !r.cur.Started {
		r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_RUNNING}, true)
	}
	startedAt := time.Now()
	if found.State != nil {
		if t, err := time.Parse(time.RFC3339Nano, found.State.StartedAt); err == nil {
			startedAt = t
		}
	}
	return r.monitor(ctx, found.ID, startedAt, intent)
}

// leave lets go of a run whose agent is stopping: its tails stop where they
// are (their cursors are stored with the events they sent) and its containers
// keep running for the next agent process. No terminal status is reported.
func (r *run) leave() *podiumv1.StatusChange {
	r.log.Info("agent is stopping; leaving the task running for the next agent process")
	r.bg.Wait()
	return nil
}

// monitor watches a started container until it ends, stopping it on a
// cancel or a timeout, and turns how it ended into the terminal status.
// intent is a stop a previous agent process began.
func (r *run) monitor(ctx context.Context, id string, startedAt time.Time, intent *stopIntent) *podiumv1.StatusChange {
	spec := r.spec
	taskTail := r.startTaskTail(ctx)
	stopSignal := "SIGTERM"
	if info, err := r.inspect(ctx, id); err == nil && info.Config != nil && info.Config.StopSignal != "" {
		stopSignal = info.Config.StopSignal
	}

	// The wait's context is the run's, not the preparation's: a cancel
	// must still see the exit.
	waitC, waitErrC := r.e.docker.ContainerWait(ctx, id, container.WaitConditionNotRunning)

	var timeoutC <-chan time.Time
	if s := spec.GetTimeoutSeconds(); s > 0 {
		t := time.NewTimer(max(0, time.Until(startedAt.Add(time.Duration(s)*time.Second))))
		defer t.Stop()
		timeoutC = t.C
	}
	why := outcomeExited
	var killC <-chan time.Time
	beginStop := func(o outcome, reason string, grace time.Duration) {
		why = o
		in := stopIntent{Why: o, Reason: reason, KillAt: time.Now().Add(grace)}
		r.saveIntent(in)
		killC = r.signalStop(ctx, id, stopSignal, in.KillAt)
	}
	if intent != nil {
		// A previous agent process began stopping the task; finish the job.
		why = intent.Why
		killC = r.signalStop(ctx, id, stopSignal, intent.KillAt)
	}

	cancelC := r.cancelled
	var exit *container.WaitResponse
	var waitErr error
	for exit == nil && waitErr == nil {
		select {
		case res := <-waitC:
			exit = &res
		case err := <-waitErrC:
			if ctx.Err() != nil {
				return r.leave()
			}
			waitErr = err
		case <-cancelC:
			cancelC = nil // a closed channel would spin the loop
			if why == outcomeExited {
				r.log.Info("stopping the task", "reason", r.cancelReason)
				beginStop(outcomeCancel, r.cancelReason, r.e.graceFor(spec, r.cancelGrace))
			}
		case <-timeoutC:
			timeoutC = nil
			if why == outcomeExited {
				r.log.Info("task ran past its timeout; stopping it", "timeout_seconds", spec.GetTimeoutSeconds())
				beginStop(outcomeTimeout, ReasonTimeout, r.e.graceFor(spec, 0))
			}
		case <-killC:
			killC = nil
			r.log.Info("the task did not stop within its grace period; killing it")
			r.kill(ctx, id)
		case <-ctx.Done():
			return r.leave()
		}
	}

	// The container has exited: the runner log holds everything it wrote.
	// Reading it to the end before the status is what puts the terminal
	// status after the last byte.
	taskTail.finish()
	exitRec, tailErr := taskTail.wait()
	if ctx.Err() != nil {
		return r.leave()
	}
	r.reportTailError(tailErr)
	r.stopSidecars(ctx)

	waitMsg := ""
	if waitErr != nil {
		waitMsg = waitErr.Error()
	} else if exit != nil && exit.Error != nil {
		waitMsg = exit.Error.Message
	}
	st := r.compose(ctx, why, exitRec, &id, waitMsg)
	if !r.copyWorkspace(ctx, id) {
		return r.leave()
	}
	// The containers go now, before anyone hears the task ended; the network
	// and volume go after the terminal status (see main): removing a network
	// takes Docker ~170 ms, which a user waiting on `podium run` should not.
	r.removeContainers(ctx)
	r.teardownAfterStatus = true
	return st
}

// removeContainers removes the attempt's task and sidecar containers.
func (r *run) removeContainers(ctx context.Context) {
	tctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	cs, err := r.e.docker.ContainerList(tctx, container.ListOptions{All: true, Filters: r.objectFilter()})
	if err != nil {
		r.log.Error("listing the task's containers failed; they are removed with its network", "err", err)
		return
	}
	for _, c := range cs {
		if err := r.e.docker.ContainerRemove(tctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			r.log.Error("removing a task container failed; it is retried with the network", "container", shortID(c.ID), "err", err)
		}
	}
}

// objectFilter selects every Docker object of this attempt.
func (r *run) objectFilter() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", LabelNode+"="+r.e.nodeID),
		filters.Arg("label", LabelTask+"="+r.key.TaskID),
		filters.Arg("label", fmt.Sprintf("%s=%d", LabelAttempt, r.key.Attempt)),
	)
}

// signalStop sends the container its stop signal and returns the channel
// that fires when it is time for SIGKILL.
func (r *run) signalStop(ctx context.Context, id, sig string, killAt time.Time) <-chan time.Time {
	kctx, cancel := apiCtx(ctx, apiTimeout)
	err := r.e.docker.ContainerKill(kctx, id, sig)
	cancel()
	if err != nil && !isNotFound(err) && !cerrdefs.IsConflict(err) {
		r.log.Warn("could not signal the task's container; it will be killed after the grace period", "signal", sig, "err", err)
	}
	return time.After(max(0, time.Until(killAt)))
}

func (r *run) kill(ctx context.Context, id string) {
	kctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	if err := r.e.docker.ContainerKill(kctx, id, "SIGKILL"); err != nil && !isNotFound(err) && !cerrdefs.IsConflict(err) {
		r.log.Warn("could not kill the task's container", "err", err)
	}
}

func (r *run) saveIntent(in stopIntent) {
	b, _ := json.Marshal(in)
	if err := os.WriteFile(filepath.Join(r.dir, stopFile), b, 0o600); err != nil {
		r.log.Warn("could not record why the task is being stopped; an agent restart now would report it as exited", "err", err)
	}
}

func (r *run) loadIntent() *stopIntent {
	b, err := os.ReadFile(filepath.Join(r.dir, stopFile))
	if err != nil {
		return nil
	}
	var in stopIntent
	if json.Unmarshal(b, &in) != nil || (in.Why != outcomeCancel && in.Why != outcomeTimeout) {
		return nil
	}
	return &in
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
func (r *run) compose(ctx context.Context, why outcome, exitRec *runlog.Exit, id *string, waitMsg string) *podiumv1.StatusChange {
	var code *int32
	var sig int32
	oom := false
	if exitRec != nil {
		c := int32(exitRec.Code)
		code, sig, oom = &c, int32(exitRec.Signal), exitRec.OOMKills > 0
	}
	memLimited := r.spec.GetResources().GetMemoryMb() > 0
	if id != nil {
		info, err := r.inspect(ctx, *id)
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
				}
			}
		}
	}
	switch why {
	case outcomeCancel:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_CANCELLED, Reason: r.cancelReason, ExitCode: code, Signal: sig}
	case outcomeTimeout:
		return &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: ReasonTimeout, ExitCode: code, Signal: sig}
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
		st.Reason = fmt.Sprintf("%s: the task used more than its memory limit of %d MB and the kernel killed it; "+
			"raise resources.memory_mb or make the task use less", ReasonOOM, r.spec.GetResources().GetMemoryMb())
	case oom:
		st.Reason = ReasonOOM + ": the node ran out of memory and the kernel killed the task"
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

// signalOf reads a signal out of a shell-style exit status: 128+N means the
// process was killed by signal N.
func signalOf(code *int32) int32 {
	if code != nil && *code > 128 && *code < 128+65 {
		return *code - 128
	}
	return 0
}

func (r *run) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	ictx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	info, err := r.e.docker.ContainerInspect(ictx, id)
	if err == nil && info.ContainerJSONBase == nil {
		err = errors.New("the engine returned no container state")
	}
	return info, err
}

// teardown removes every Docker object of the attempt: its containers, then
// its network and volume. It finds them by their labels rather than by what
// this run remembers creating, so it also cleans up after a run an earlier
// agent process started.
func (r *run) teardown(ctx context.Context) {
	tctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	if err := r.e.removeLabelled(tctx, r.objectFilter(), func(Key) bool { return true }); err != nil {
		r.log.Error("tearing down the task's containers, network or volume failed", "err", err)
	}
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
