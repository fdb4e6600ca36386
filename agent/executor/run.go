package executor

// A run's life: the attempt's host directory, preparing and launching its
// containers, resuming one an earlier agent started, and watching it to its
// end. Its image is image.go, stopping it stop.go, what it reports
// status.go, its artifacts artifacts.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/redact"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/agent/runner"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The host directory of an attempt.
const (
	logFile     = "output.log" // the task's runner log
	inboxDir    = "inbox"      // mounted at inbox.ContainerDir
	sidecarsDir = "sidecars"   // <name>.log: the sidecars' runner logs
	// volumeDir holds the files of the workspace volume (see createVolume).
	volumeDir = "volume"
	// progressFile is the agent's progress file for the task's runner log
	// (package runlog), mounted read-only at runner.ProgressPath; a
	// sidecar's is sidecars/<name>.progress.
	progressFile = "output.progress"
	// leaseFile is the agent's lease on the task (package runlog), mounted
	// read-only at runner.LeasePath: the moment the runner fences the task
	// unless the agent moves it on first (Executor.Lease).
	leaseFile = "lease"
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
	emitFn attempt.Emit
	log    *slog.Logger
	dir    string // the attempt's host directory
	// network is the pool network the attempt took (netpool.go), or ""
	// when it has a network of its own, NetworkName. It is set before any
	// container joins the network and not changed after.
	network string
	// prepErr is why the host directory could not be made, if it could not.
	prepErr error
	// gpuErr is why the attempt could not be given its GPUs (gpus.go).
	gpuErr error

	// prepCtx covers everything before the container starts (pull, create,
	// sidecars, start). Cancel ends it, so a cancel during a long image
	// pull does not wait for the pull.
	prepCtx    context.Context
	prepCancel context.CancelFunc

	once         sync.Once
	cancelled    chan struct{} // closed by the first cancel
	cancelReason string        // written before cancelled is closed
	cancelGrace  time.Duration
	// stopReason is why the agent stopped the task itself, for an outcome
	// whose reason is not fixed (outcomeDiskFull).
	stopReason string

	// emitMu serialises the run's events and guards cur: an event and the
	// cursor stored with it must go out in the order the cursor advanced,
	// or a restart could resume from a cursor older than an event already
	// sent.
	emitMu sync.Mutex
	cur    attempt.Cursor
	// lastSeq is the seq the caller of Emit gave the newest event.
	lastSeq atomic.Uint64

	// bg counts the run's helper goroutines (log tails, readiness
	// checks); the run joins them before it ends.
	bg sync.WaitGroup

	// sidecarTails are the running tails of the sidecars' runner logs.
	sidecarTails map[string]*tail

	// outputLimit is the most output the attempt keeps (its spec's, or the
	// node's default). capped mirrors cur.Capped for the tails, which
	// check it for every record without taking emitMu.
	outputLimit int64
	capped      atomic.Bool

	// redactor redacts the attempt's secrets from its output (nil: it has
	// none). It is set, under emitMu, before secretsReady is closed, and
	// not changed after; the tails read it once secretsReady is closed.
	// withhold is set when the output cannot be redacted (see
	// withholdLocked): the tails then drop it.
	redactor     *redact.Redactor
	secretsReady chan struct{}
	withhold     atomic.Bool

	// sel is what the spec's artifacts globs select (the default when
	// selErr says they cannot be used, which validate refuses to run).
	sel    *selection
	selErr error
	// workspaceSkipped are the selected workspace files copyWorkspace did
	// not copy, and why, noted in the task's log with the other artifacts.
	workspaceSkipped []artifacts.Skipped

	// seen is what the engine's stats showed the task's container use
	// while it ran (watchUsage), set once it has ended.
	seen usageSeen

	// images are the ids of the images the run's task and sidecars use,
	// told to Config.ImageUsed again as the run ends.
	imageMu sync.Mutex
	images  []string

	done chan struct{}
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

// apiCtx is a bounded context for one engine call that must happen even when
// the run's own context has ended: removing what a run created is exactly
// what it must still do when the agent stops during preparation.
func apiCtx(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), d)
}

// main runs body and reports its outcome. The run leaves the table before
// its terminal event goes out, so the slot is free by the time the
// coordinator hears the task ended; the host directory goes only after the
// coordinator has stored the terminal event (the attempt is not over for it
// until then), and after the artifacts' uploads, which read from it; with
// Config.KeepAttemptData it is marked done instead, for SweepAttemptData.
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
	// left go before the executor counts this run as done: tried until
	// they are gone (an engine restarting refuses for a while), or until
	// the agent stops, which leaves them to the next agent's RemoveOrphans.
	defer func() {
		if r.teardownAfterStatus {
			r.teardownUntilDone(ctx)
		}
	}()
	r.bg.Wait()
	r.e.mu.Lock()
	delete(r.e.runs, r.key)
	if final != nil {
		// The directory is still this run's until finishDir: a sweep
		// must not take it meanwhile.
		r.e.uploading[r.key] = true
		defer func() {
			r.e.mu.Lock()
			delete(r.e.uploading, r.key)
			r.e.mu.Unlock()
		}()
	}
	r.e.mu.Unlock()
	if final == nil {
		return
	}
	// The container has ended: its GPUs are free for the next task. (A
	// run without a status leaves its container running for the next
	// agent process, which holds them again.)
	r.releaseGPUs()
	if final.GetState() == podiumv1.TaskState_TASK_STATE_QUEUED {
		// Given back before anything of it started (givenBack): there is
		// nothing to collect or keep, and the coordinator may assign the
		// same attempt here again, so its directory goes before it hears.
		r.log.Info("task given back", "reason", final.GetReason())
		r.removeDir()
		r.emitStatus(final, false)
		return
	}
	// The reason can quote a sidecar's output, so it is logged redacted.
	r.emitMu.Lock()
	reason := r.redactor.String(final.GetReason())
	r.emitMu.Unlock()
	attrs := []any{"state", final.GetState().String(), "reason", reason}
	if final.ExitCode != nil {
		attrs = append(attrs, "exit_code", final.GetExitCode())
	}
	if u := final.GetUsage(); u != nil {
		attrs = append(attrs, "cpu_seconds", known(u.CpuSeconds), "peak_memory_bytes", known(u.PeakMemoryBytes),
			"wall_seconds", known(u.WallSeconds))
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
	finalSeq := r.lastSeq.Load()
	r.endImages()
	if job != nil {
		job.Ended()
		// While the uploads go on, the runner logs go as soon as the
		// terminal status is stored: nothing needs them any more (a
		// restarted agent takes the uploads over from their record),
		// unless the directory is to be kept for debugging.
		var storedC <-chan time.Time
		if r.e.stored != nil && r.e.keepData <= 0 {
			t := time.NewTicker(storedCheck)
			defer t.Stop()
			storedC = t.C
		}
		for waiting := true; waiting; {
			select {
			case <-job.Done():
				waiting = false
			case <-storedC:
				if r.e.stored(r.key, finalSeq) {
					storedC = nil
					r.removeRunnerLogs()
				}
			case <-ctx.Done():
				// Pending uploads end with the agent; the next agent
				// process takes them over from their record
				// (ResumeUploads) or, with nothing left, removes the
				// directory (RemoveOrphans).
				<-job.Done()
				return
			}
		}
	}
	// The directory goes (or is marked to go later) once the coordinator
	// has stored the terminal status: until then the attempt is not over
	// for it. An agent that stops first leaves it to the next one's sweep
	// (SweepAttemptData), which waits for the same.
	if !r.waitStored(ctx, finalSeq) {
		return
	}
	r.finishDir()
}

// storedCheck is how often a finished run whose artifacts are uploading asks
// whether its terminal status is stored yet.
const storedCheck = time.Second

// removeRunnerLogs removes the runner logs of a run whose terminal status is
// stored, and their progress files.
func (r *run) removeRunnerLogs() {
	for _, p := range []string{filepath.Join(r.dir, logFile), filepath.Join(r.dir, progressFile), filepath.Join(r.dir, leaseFile), filepath.Join(r.dir, sidecarsDir)} {
		if err := os.RemoveAll(p); err != nil {
			r.log.Warn("could not remove a runner log of a finished task; it goes with the task's directory", "path", p, "err", err)
		}
	}
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
		if errors.Is(r.prepErr, syscall.ENOSPC) || errors.Is(r.prepErr, syscall.EDQUOT) {
			// The node's trouble, not the task's: the reason says so as
			// a full disk met while the task ran does.
			return failed("%s: the task's directory on the node could not be prepared: %v (free space in %s, "+
				"or raise podium-agent --min-free-disk-mb so that the node stops taking tasks before its disk fills)",
				ReasonNodeDiskFull, r.prepErr, r.e.tasksDir)
		}
		return failed("the task's directory on the node could not be prepared: %v (check the agent's data directory and its free space)", r.prepErr)
	}
	// Descriptors for its start, or a wait for them (fds.go).
	release, st, ok := r.e.fds.acquire(ctx, r.note, r.isCancelled)
	if !ok {
		st, _ := r.interrupted(ctx)
		return r.unprepared(st)
	}
	if st != nil {
		return r.unprepared(st)
	}
	defer release()
	img, st := r.ensureImage(ctx, spec.GetImage(), spec.GetPull())
	if img == nil {
		return r.unprepared(st)
	}
	argv, err := resolveArgv(spec.GetCommand(), img)
	if err != nil {
		return r.unprepared(failed("%v", err))
	}
	sidecars := make([]*sidecar, 0, len(spec.GetSidecars()))
	for _, sc := range spec.GetSidecars() {
		simg, st := r.ensureImage(ctx, sc.GetImage(), sc.GetPull())
		if simg == nil {
			return r.unprepared(st)
		}
		sargv, err := resolveArgv(sc.GetCommand(), simg)
		if err != nil {
			return r.unprepared(failed("sidecar %q: %v", sc.GetName(), err))
		}
		sidecars = append(sidecars, &sidecar{spec: sc, argv: sargv})
	}
	if st, stop := r.interrupted(ctx); stop {
		return r.unprepared(st)
	}

	id, started, st := r.launch(ctx, argv, sidecars)
	release()
	// The pool makes the network this attempt took again now, not while
	// the attempt was still calling the engine to start its container.
	r.e.pool.refill()
	if !started {
		r.stopSidecarTails(ctx)
		r.teardownOrLater(ctx)
		if st == nil {
			r.removeDir() // the agent is stopping; there is nothing to resume
		}
		return st
	}
	return r.monitor(ctx, id, time.Now(), nil)
}

// unprepared ends a run whose containers were never made, with st. With a
// status, its directory goes as any finished run's does (main); without one
// the agent is stopping, nothing is left to resume, and it goes now.
func (r *run) unprepared(st *podiumv1.StatusChange) *podiumv1.StatusChange {
	if st == nil {
		r.removeDir()
	}
	return st
}

// validate refuses what the node will not run, whatever the coordinator
// let through: capabilities beyond the allowed list, artifacts globs it
// cannot match, a user that is not one, limits above the node's maxima,
// container options out of their bounds, sidecar names that cannot be host
// names on the task's network, and a privileged sidecar on a node that does
// not allow one.
func (r *run) validate() *podiumv1.StatusChange {
	spec := r.spec
	if spec.GetImage() == "" {
		return failed("the task spec names no image: submit it again with an image")
	}
	if st := r.gpuStatus(); st != nil {
		return st
	}
	if r.selErr != nil {
		return failed("the spec's artifacts globs cannot be used: %v", r.selErr)
	}
	if st := r.checkOutputLimit(); st != nil {
		return st
	}
	for _, c := range spec.GetCapabilities() {
		if _, err := taskspec.NormalizeCapability(c); err != nil {
			return failed("capability refused: %v", err)
		}
	}
	allow, err := taskspec.AllowEgress("spec.allow_egress", spec.GetAllowEgress())
	if err != nil {
		return failed("%v", err)
	}
	if r.e.egress != nil {
		if err := r.e.egress.Check(allow); err != nil {
			return failed("task refused: %v", err)
		}
	}
	if u := spec.GetUser(); u != "" {
		if p := taskspec.UserProblem(u); p != "" {
			return failed("user refused: %s", p)
		}
	}
	if why := r.e.limits.refusal(spec); why != "" {
		return failed("%s", why)
	}
	if err := taskspec.CheckContainerOptions(spec); err != nil {
		return failed("container options refused: %v", err)
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
		if sc.GetPrivileged() && !r.e.allowPrivileged {
			return failed("%s", privilegedRefusal(n))
		}
	}
	return nil
}

// privilegedRefusal is the reason a node that does not allow privileged
// sidecars gives for a task that has one.
func privilegedRefusal(sidecar string) string {
	return fmt.Sprintf("sidecar %q asks to run privileged, and this node does not allow privileged sidecars "+
		"(its agent runs without --allow-privileged-sidecars); the scheduler should have placed the task on a node "+
		"that allows them: submit it again, or ask the operator to start an agent with the flag", sidecar)
}

// prepareDir makes the attempt's host directory: the empty runner logs the
// containers' runners append to, the inbox, the artifacts directory and the
// workspace volume's directory.
//
// What a task writes to is writable by every user, because the task may run
// as any user (its spec's, the node's default, or its image's, which only
// the image knows): the runner logs and the inbox and artifacts directories
// say so themselves, and the workspace's directory is made here. Nothing
// else can reach them: the tasks directory is the agent's own (0700).
func (r *run) prepareDir() error {
	if err := os.MkdirAll(filepath.Join(r.dir, sidecarsDir), 0o755); err != nil {
		return err
	}
	vol := filepath.Join(r.dir, volumeDir)
	if err := os.Mkdir(vol, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(vol, 0o777); err != nil { // the umask had its say at creation
		return err
	}
	if err := runlog.Create(filepath.Join(r.dir, logFile)); err != nil {
		return err
	}
	if err := runlog.CreateProgress(filepath.Join(r.dir, progressFile)); err != nil {
		return err
	}
	if err := runlog.CreateLease(filepath.Join(r.dir, leaseFile)); err != nil {
		return err
	}
	for _, sc := range r.spec.GetSidecars() {
		if err := runlog.Create(r.sidecarLog(sc.GetName())); err != nil {
			return err
		}
		if err := runlog.CreateProgress(r.sidecarProgress(sc.GetName())); err != nil {
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

func (r *run) sidecarProgress(name string) string {
	return filepath.Join(r.dir, sidecarsDir, name+".progress")
}

// launch creates the network, the volume and the sidecars, waits for the
// sidecars, and creates and starts the task's container. started reports
// whether the container started; if not, st is the status to end with (nil:
// the agent is stopping) and the caller tears down.
func (r *run) launch(ctx context.Context, argv []string, sidecars []*sidecar) (id string, started bool, st *podiumv1.StatusChange) {
	bridge, err := r.createNetwork()
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, prepFailed(err, "the task's network could not be created: %v (if the engine ran out of address pools, "+
			"give it more with default-address-pools in /etc/docker/daemon.json)", err)
	}
	// Before anything runs on the network: a container started first
	// would have a moment without its rules.
	if bridge != "" {
		if err := r.openEgress(bridge); err != nil {
			if st, stop := r.interrupted(ctx); stop {
				return "", false, st
			}
			return "", false, failed("the task's egress rules could not be installed, so it was not started: %v", err)
		}
	}
	if err := r.createVolume(); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, prepFailed(err, "the task's workspace volume could not be created: %v", err)
	}
	if st, ok := r.startSidecars(ctx, sidecars); !ok {
		return "", false, st
	}
	if st, stop := r.interrupted(ctx); stop {
		return "", false, st
	}
	id, err = r.createContainer(ctx, r.taskContainer(argv))
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, prepFailed(err, "the task's container could not be created: %v (check the task's working directory and resource limits; "+
			"the node's Docker engine must be running and have room for another container)", err)
	}
	if st, stop := r.interrupted(ctx); stop {
		return "", false, st
	}
	sctx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
	var secretsIn *types.HijackedResponse
	if files := r.fileSecrets(); len(files) > 0 {
		// Attached before the start, so the runner, which waits for
		// them before it starts the command, reads them whole.
		att, err := r.e.docker.ContainerAttach(sctx, id, container.AttachOptions{Stream: true, Stdin: true})
		if err != nil {
			cancel()
			if st, stop := r.interrupted(ctx); stop {
				return "", false, st
			}
			return "", false, failed("the task's file secrets could not be handed to its container: %v", err)
		}
		secretsIn = &att
	}
	err = r.e.docker.ContainerStart(sctx, id, container.StartOptions{})
	cancel()
	if secretsIn != nil {
		r.deliverFileSecrets(secretsIn, err == nil)
	}
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return "", false, st
		}
		return "", false, prepFailed(err, "the task's container could not be started: %v (check that image %q runs on this machine)", err, r.spec.GetImage())
	}
	r.log.Info("container started", "container", shortID(id))
	r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_RUNNING}, true)
	return id, true, nil
}

// deliverFileSecrets writes the task's file secrets to its container's
// stdin, where its runner reads them, and closes it. A write that fails
// leaves the runner with less than the whole, which it refuses: the task
// then fails saying its secrets did not arrive whole.
func (r *run) deliverFileSecrets(att *types.HijackedResponse, started bool) {
	defer att.Close()
	if !started {
		return
	}
	if _, err := att.Conn.Write(runner.EncodeSecrets(r.fileSecrets())); err != nil {
		r.log.Warn("writing the task's file secrets to its container failed", "err", err)
		return
	}
	if err := att.CloseWrite(); err != nil {
		r.log.Warn("closing the stdin of the task's container failed", "err", err)
	}
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
			why, r.stopReason = intent.Why, intent.Reason
		}
		st := r.compose(ctx, why, exit, nil, "")
		r.checkWorkspaceCopied()
		r.teardownOrLater(ctx)
		return st
	}
	r.reopenEgress(ctx)
	r.usedImage(found.Image)
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

// stoppedByEngine says whether the engine, stopping or restarting, ended a
// task the agent did not stop: lost says the engine went away while the
// container ran. An exit nobody here asked for is checked against the
// engine: one that does not take new connections any more is stopping, and
// stopped the container on its way (the wait still answered, on a
// connection it had open). A task that succeeded keeps its success, and an
// engine with live-restore stops no container as it goes or comes back: a
// task that ended meanwhile ended by itself.
func (r *run) stoppedByEngine(ctx context.Context, lost bool, rec *runlog.Exit, exit *container.WaitResponse) bool {
	// The runner's record is exact; the engine's status is second best,
	// and none is known of a container that ended while the engine was
	// away without a record.
	succeeded := false
	switch {
	case rec != nil:
		succeeded = rec.Code == 0 && rec.Signal == 0
	case exit != nil && !lost:
		succeeded = exit.StatusCode == 0
	}
	if !succeeded && !r.e.engineKnown.Load() && ctx.Err() == nil {
		// Whether the engine keeps containers through its restarts was
		// never learned: the one question, at the task's start, met an
		// engine already going down. Ask it once it is back (for a while)
		// rather than take live-restore as off and call a task that ended
		// by itself stopped by the engine.
		lctx, cancel := context.WithTimeout(ctx, engineLearnWait)
		r.e.awaitEngine(lctx)
		cancel()
	}
	switch {
	case succeeded || ctx.Err() != nil || r.e.liveRestore.Load():
		return false
	case lost:
		return true
	case !r.e.EngineAnswers(ctx):
		r.log.Warn("the task's container stopped as the Docker engine stopped answering; the engine stopped it")
		return true
	}
	return false
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

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
