// Package executor runs the tasks assigned to this node in the local Docker
// engine and turns what happens to them into the task events the coordinator
// stores: status changes, byte-exact output chunks and notes.
//
// Every task and sidecar container runs podium-runner as PID 1 (package
// runner). The runner writes the container's output and exit status to a
// runner log in the task's directory on the host, and the executor tails that
// file. Containers are therefore not the agent's children: when the agent
// stops, they keep running, and the next agent process resumes them (Resume)
// at the exact byte it had turned into events, which it learns from the cursor
// it stored with each event.
//
// The executor knows nothing about the coordinator. It is handed an assignment
// and a function to emit events into (attempt.Emit); numbering, spooling,
// acknowledging and re-sending those events belong to the session that owns
// the stream. The executor and the session do not import each other: what
// they share (the emit callback, the Cursor stored with each event, the
// errors a caller branches on, the redacted form of an assignment) is package
// attempt's, and package agent hands the executor to the session as the
// session's Runner.
//
// # Per task
//
// A task attempt gets, all labelled with task, attempt and node (LabelTask,
// LabelAttempt, LabelNode) so `docker ps --filter label=podium.task=…` finds
// them and a restarted agent can tell its own from anyone else's:
//
//   - a private bridge network, podium-<task>-<attempt>, on which the task's
//     container is "task" and each sidecar is its name; with a warm pool
//     (Config.NetworkPool) it is instead a network made ahead of the task,
//     podium-pool-<random>, labelled LabelPool and LabelNode rather than
//     with the task's labels, and still the task's alone (netpool.go);
//   - a volume, podium-<task>-<attempt>-workspace, mounted at /workspace,
//     whose files are kept in the attempt's host directory (volume/), on
//     the disk the agent measures, where the agent can see how much of it
//     the task fills (see Limits.WorkspaceBytes);
//   - a host directory, <data>/tasks/<task>-<attempt>/, holding the runner
//     logs (output.log, sidecars/<name>.log) and the progress files that
//     tell their runners how far the agent has read them (output.progress,
//     sidecars/<name>.progress), the inbox (inbox/, mounted at
//     /run/podium/inbox), the artifacts directory (artifacts/, mounted at
//     /workspace/.podium/artifacts over the workspace volume) and, once the
//     task has exited, the workspace files its artifacts globs select
//     elsewhere (workspace/);
//   - its sidecars' containers, started and waited for before the task's;
//   - with an egress filter (Config.Egress), its network's rules (package
//     egress), which refuse link-local, host and tailnet addresses less the
//     node's --allow-egress and the spec's allow_egress. They are installed
//     before any of its containers start, and removed once the network is.
//
// Teardown removes all of it, and tries again until it has: an engine that
// is stopping or restarting refuses for a while (engine.go). A task whose
// container the engine itself stopped, as it stopped or restarted, fails with
// a reason starting ReasonEngineRestarted and no exit code.
//
// # Artifacts
//
// When the task's container has exited, the files it left in its artifacts
// directory are collected (package artifacts) and handed to the uploader
// (Config.Artifacts). A spec with artifacts globs narrows that, and may
// widen it to the rest of the workspace: those files live in the workspace
// volume, which only the container reaches, so they are copied out of the
// exited container (CopyFromContainer on each glob's leading directory) into
// the attempt's host directory before the container is removed, and uploaded
// from there like the others, retries included. The terminal status waits until each file has been
// tried once, at most Config.ArtifactWait, so that artifacts are usually
// stored, and noted in the task's log, before the task counts as ended; an
// upload that fails never changes the status. Uploads still retrying go on
// after the status is sent, and the host directory is removed only once they
// are done (stored, refused, or past the coordinator's window) and the
// coordinator has stored the terminal status, or Config.KeepAttemptData
// after that (SweepAttemptData, which the agent runs at start and hourly,
// removes what is left). Meanwhile the
// files still to send are listed in the directory (uploadsFile), so that an
// agent restarted before they are done takes them over (ResumeUploads)
// instead of removing them with the directory. The task's container runs with every capability
// dropped except those its spec adds back from taskspec.AllowedCapabilities,
// with no-new-privileges, never privileged, and with no mounts but the ones
// above: never the Docker socket. Its spec's container options (read_only,
// shm_size, ulimits, tmpfs) go on its host configuration (applyOptions). A
// sidecar is privileged only when its spec asks and the node allows it
// (Config.AllowPrivilegedSidecars); a node that does not fails such a task
// before making anything of it.
//
// # Limits and user
//
// Every container runs under the node's Limits where its spec sets none:
// CPU quota, memory with swap equal to memory (overuse is an OOM kill,
// reported as one), a pids limit, and the task's timeout. A task that
// reaches its pids limit is stopped by its runner and fails with a reason
// starting "pids limit"; one that fills more disk than the workspace limit
// fails with one starting "workspace full". The task's command runs as its
// spec's user, else the node's default user, else the image's; the
// directories mounted into it (workspace, artifacts, inbox) and its runner
// log are writable by whoever that is.
// # Output
//
// An attempt keeps at most its output limit (the spec's, else
// Config.OutputLimit; at most Config.MaxOutputLimit): the task's output and
// its sidecars' lines, which are also rate-limited. Past it, the rest is read
// and dropped and one note says so; the task runs on. An Emit that blocks
// (the session's outbox is full) stops a tail reading its runner log, and
// the runner, told through the progress file how far the tail has read,
// holds the task's output back once Config.RunnerBacklog is unread: the task
// is slowed down, and neither the agent's memory nor the host's disk takes
// what it prints. output.go has the limits, tail.go the reading.
//
// # Secrets
//
// An assignment's secrets (Assign.secrets) go into the task's container
// only: env secrets into its environment (visible to `docker inspect` on
// the node), file secrets into a tmpfs at /run/secrets, handed to its
// runner over the container's stdin, mode 0400 and the task user's. Every
// event made of the task's or its sidecars' output has their values, in the
// forms package redact looks for, replaced with [redacted:NAME]; the stream
// redaction is in the chunker (tail.go), the notes' and reasons' in
// emitLocked. A resumed attempt holds its output until Adopted hands it the
// values again (secrets.go).
//
// The data directory and the runner binary must be on the Docker engine's own
// machine, because they are bind-mounted: a remote DOCKER_HOST is not
// supported.
package executor

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/egress"
	"github.com/podiumhq/podium/agent/gpu"
	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Labels every Docker object the executor creates carries. They are how a
// person running `docker ps` tells which task a container belongs to, and how
// the agent finds what it left behind.
const (
	LabelTask    = "podium.task"
	LabelAttempt = "podium.attempt"
	LabelNode    = "podium.node"
	// LabelRole is "task" or "sidecar" on containers.
	LabelRole = "podium.role"
	// LabelSidecar is a sidecar container's name.
	LabelSidecar = "podium.sidecar"
)

const (
	roleTask    = "task"
	roleSidecar = "sidecar"
)

// RunnerName is the runner binary's file name, looked for next to the
// agent's own executable.
const RunnerName = "podium-runner"

// WorkspaceDir is where a task's workspace volume is mounted.
const WorkspaceDir = "/workspace"

// DefaultGrace is how long a stopped task gets between SIGTERM and SIGKILL
// when neither the cancel nor the task's spec says otherwise (docs/protocol.md).
const DefaultGrace = 30 * time.Second

// DefaultArtifactWait is how long a task's terminal status waits, at most,
// for the first try of its artifacts' uploads when Config.ArtifactWait does
// not say otherwise.
const DefaultArtifactWait = time.Minute

// ReasonTimeout is the reason of a task stopped because it ran longer than its
// spec's timeout_seconds.
const ReasonTimeout = "timeout"

// ReasonOOM starts the reason of a task the kernel killed for using more
// memory than its limit.
const ReasonOOM = "oom"

// ReasonPidsLimit starts the reason of a task stopped because it reached its
// limit of processes and threads (see package runner).
const ReasonPidsLimit = "pids limit"

// MaxChunk is the most output bytes one LogChunk event carries. It keeps every
// event far below any message-size limit on the way to the coordinator, and a
// chunk is the unit the coordinator stores, so it also bounds a row.
const MaxChunk = runlog.MaxRecordData

// apiTimeout bounds every engine call that is not open-ended (create, start,
// inspect, remove). An engine that does not answer in this long is wedged,
// and a run stuck on it forever would hold a slot forever.
const apiTimeout = 2 * time.Minute

// ErrNotResumable is returned by Resume for an attempt that has nothing left
// to resume: its container never started, or is gone without an exit status
// in its runner log (the machine rebooted, say). The task was lost with the
// node's previous life, and the coordinator's node-loss policy is the right
// judge of what happens to it, so the caller forgets it.
var ErrNotResumable = errors.New("executor: nothing of this task attempt is left to resume")

// Key names one attempt of one task (see package attempt). It is the same
// type as attempt.Key, under the name the executor's API has always used, so
// the session and the spool hand the executor's keys around without a
// conversion.
type Key = attempt.Key

// Config is what an Executor needs.
type Config struct {
	// Docker is the engine client. Create it with client.FromEnv and
	// client.WithAPIVersionNegotiation so older engines (Debian's 20.10 speaks
	// API 1.41) work.
	Docker *client.Client
	// NodeID is written into every object's labels.
	NodeID string
	// RunnerPath is the podium-runner binary on this machine (see
	// FindRunner). It is bind-mounted read-only into every container.
	RunnerPath string
	// TasksDir is the directory the tasks' host directories are made in,
	// <data>/tasks.
	TasksDir string
	// Logger receives the executor's own log; nil means slog.Default().
	Logger *slog.Logger
	// DefaultGrace applies when neither a cancel nor the spec sets one; 0
	// means DefaultGrace.
	DefaultGrace time.Duration
	// Artifacts uploads the files tasks leave in their artifacts directory
	// (package artifacts/upload). Nil still collects them and notes what
	// is skipped, but uploads nothing.
	Artifacts artifacts.Uploader
	// ArtifactWait bounds how long a terminal status waits for the first
	// try of the task's uploads; 0 means DefaultArtifactWait.
	ArtifactWait time.Duration
	// Egress keeps tasks from link-local, host and tailnet addresses
	// (package egress): each task network gets a bridge name of its own
	// and its rules before any of its containers start. Nil runs tasks
	// without them, and with Docker's own bridge names.
	Egress *egress.Filter
	// Limits are the node's defaults and maxima for each task, and its
	// workspace limit; the zero value limits nothing.
	Limits Limits
	// OutputLimit caps the output of an attempt whose spec sets none
	// (output_limit_bytes 0); 0 means DefaultOutputLimit. MaxOutputLimit
	// is the most a spec may ask for; 0 means OutputLimit.
	OutputLimit, MaxOutputLimit int64
	// RunnerBacklog is how much of a runner log may go unread before its
	// runner holds the task's output back (see package runlog's progress
	// file); 0 means DefaultRunnerBacklog.
	RunnerBacklog int64
	// DiskFullAfter is how long a task's output may find no room on the
	// node's disk before the task is stopped, failing with the reason
	// ReasonNodeDiskFull; 0 means DefaultDiskFullAfter.
	DiskFullAfter time.Duration
	// FDWait is how long a task that finds too few file descriptors to
	// start waits for them before it fails with ReasonNoFileDescriptors
	// (fds.go); 0 means DefaultFDWait.
	FDWait time.Duration
	// Stored reports whether the coordinator has stored an attempt's
	// events up to seq. With it, the runner logs of an attempt whose
	// terminal status is stored go at once, even while its artifacts
	// still upload (they hold the task's whole output: on a full disk,
	// they are what fills it); nil leaves them to go with the attempt's
	// directory once the uploads end.
	Stored func(k Key, seq uint64) bool
	// KeepAttemptData is how long an attempt's host directory is kept,
	// for debugging, once its terminal status is stored and its uploads
	// are done (podium-agent --keep-attempt-data); 0 removes it then.
	// SweepAttemptData removes what is past it.
	KeepAttemptData time.Duration
	// ImageUsed, if set, is told the id of each image a task or sidecar of
	// this node uses, as its attempt starts and as it ends (package
	// imagegc keeps the record).
	ImageUsed func(id string)
	// NetworkPool is how many task networks to keep made ahead of the
	// tasks, so that a task starting need not wait for the engine to
	// create one (netpool.go; StartPool starts the pool). 0 creates each
	// task's network as the task starts.
	NetworkPool int
	// Ended, if set, is called after each attempt's terminal status: the
	// images it used may be unneeded now (package imagegc looks).
	Ended func()
	// UsageSample is how often the engine's stats of a running task's
	// container are read, as the floor of the usage it reports (usage.go);
	// 0 means DefaultUsageSample.
	UsageSample time.Duration
	// AllowPrivilegedSidecars lets a task's sidecars run privileged when
	// their spec asks (podium-agent --allow-privileged-sidecars), for
	// Docker-in-Docker. A privileged container is root on this machine.
	// Without it a task with such a sidecar fails before anything of it
	// starts, whatever the coordinator sent: the scheduler places these
	// tasks only on nodes that report the flag, and this is the check
	// that holds if it did not.
	AllowPrivilegedSidecars bool
	// GPUs hands the node's GPUs to the attempts that ask for them
	// (gpus.go); nil: the node has none, and refuses such attempts.
	GPUs *gpu.Allocator
}

// Executor runs task attempts in Docker. It is safe for concurrent use.
type Executor struct {
	docker       *client.Client
	nodeID       string
	runnerPath   string
	tasksDir     string
	log          *slog.Logger
	defaultGrace time.Duration
	uploader     artifacts.Uploader
	artifactWait time.Duration
	egress       *egress.Filter
	limits       Limits
	// allowPrivileged is Config.AllowPrivilegedSidecars.
	allowPrivileged bool
	// outputLimit, maxOutputLimit, backlog and diskFullAfter are Config's,
	// defaults applied.
	outputLimit, maxOutputLimit, backlog int64
	diskFullAfter                        time.Duration
	stored                               func(Key, uint64) bool
	keepData                             time.Duration
	imageUsed                            func(string)
	ended                                func()
	gpus                                 *gpu.Allocator
	// fds admits starting tasks while descriptors are to spare (fds.go).
	fds *fdGate

	// imageMu is held by HoldImages while a collector decides on and
	// removes an image, and by register as it enters a run: no attempt
	// that needs the image can be accepted in between.
	imageMu sync.Mutex

	// liveRestore is whether the engine keeps its containers running
	// while it stops and starts again, as it last said (learnEngine);
	// engineKnown whether it has said.
	liveRestore, engineKnown atomic.Bool
	// engineCPUs and engineMemory are the engine's machine's CPUs and
	// memory in bytes (learnEngine; 0 until it said): the bounds of a
	// task's usage figures when its container has no limits (usage.go).
	engineCPUs, engineMemory atomic.Int64
	// usageSample is Config.UsageSample, its default applied.
	usageSample time.Duration

	// pool is the warm pool of task networks; with Config.NetworkPool 0
	// it hands out none, and still knows the pool networks of resumed
	// attempts.
	pool *netPool

	mu   sync.Mutex
	runs map[Key]*run
	// uploading are the attempts no run holds whose directory is still in
	// use: uploads ResumeUploads took over, and runs past their terminal
	// status that wait for it to be stored and their uploads to end.
	uploading map[Key]bool
	wg        sync.WaitGroup
}

// New returns an executor. It does not contact the engine; a missing engine
// shows up as failed tasks whose reason says so.
func New(cfg Config) (*Executor, error) {
	switch {
	case cfg.Docker == nil:
		return nil, errors.New("executor: Config.Docker is nil")
	case cfg.RunnerPath == "":
		return nil, errors.New("executor: Config.RunnerPath is empty; find the runner with FindRunner")
	case cfg.TasksDir == "":
		return nil, errors.New("executor: Config.TasksDir is empty")
	}
	if err := cfg.Limits.check(); err != nil {
		return nil, fmt.Errorf("executor: the node's task limits: %w", err)
	}
	if err := os.MkdirAll(cfg.TasksDir, 0o700); err != nil {
		return nil, fmt.Errorf("create the tasks directory %s: %w", cfg.TasksDir, err)
	}
	tasksDir, err := filepath.Abs(cfg.TasksDir)
	if err != nil {
		return nil, err
	}
	e := &Executor{
		docker:          cfg.Docker,
		nodeID:          cfg.NodeID,
		runnerPath:      cfg.RunnerPath,
		tasksDir:        tasksDir,
		log:             cfg.Logger,
		defaultGrace:    cfg.DefaultGrace,
		uploader:        cfg.Artifacts,
		artifactWait:    cfg.ArtifactWait,
		egress:          cfg.Egress,
		limits:          cfg.Limits,
		allowPrivileged: cfg.AllowPrivilegedSidecars,
		runs:            make(map[Key]*run),
		uploading:       make(map[Key]bool),
	}
	if e.artifactWait <= 0 {
		e.artifactWait = DefaultArtifactWait
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.defaultGrace <= 0 {
		e.defaultGrace = DefaultGrace
	}
	e.outputLimit, e.maxOutputLimit, e.backlog = cfg.OutputLimit, cfg.MaxOutputLimit, cfg.RunnerBacklog
	if e.outputLimit <= 0 {
		e.outputLimit = DefaultOutputLimit
	}
	if e.maxOutputLimit <= 0 {
		e.maxOutputLimit = e.outputLimit
	}
	if e.maxOutputLimit < e.outputLimit {
		return nil, fmt.Errorf("executor: the most output a task may ask for (%s) is less than the default (%s); raise the maximum",
			taskspec.FormatSize(e.maxOutputLimit), taskspec.FormatSize(e.outputLimit))
	}
	if e.backlog <= 0 {
		e.backlog = DefaultRunnerBacklog
	}
	e.stored = cfg.Stored
	if cfg.KeepAttemptData < 0 {
		return nil, fmt.Errorf("executor: attempt data is to be kept for %s; give 0 or more", cfg.KeepAttemptData)
	}
	e.keepData, e.imageUsed, e.ended = cfg.KeepAttemptData, cfg.ImageUsed, cfg.Ended
	if cfg.NetworkPool < 0 {
		return nil, fmt.Errorf("executor: a warm pool of %d networks; give 0 or more", cfg.NetworkPool)
	}
	e.pool = newPool(e, cfg.NetworkPool)
	e.fds = newFDGate(cfg.FDWait, e.log)
	e.gpus = cfg.GPUs
	e.diskFullAfter = cfg.DiskFullAfter
	if e.diskFullAfter <= 0 {
		e.diskFullAfter = DefaultDiskFullAfter
	}
	e.usageSample = cfg.UsageSample
	if e.usageSample <= 0 {
		e.usageSample = DefaultUsageSample
	}
	return e, nil
}

// MaxOutputLimit is the most output a spec may ask this node to keep for an
// attempt; the node reports it with its capacity, so that the scheduler does
// not place a task that asks for more here.
func (e *Executor) MaxOutputLimit() int64 { return e.maxOutputLimit }

// FindRunner returns the absolute path of the podium-runner binary: path if
// given, else podium-runner next to this program's executable (where `make
// build` and the package put it). The runner is shipped as a file beside the
// agent rather than embedded in it because it must be a separate static
// executable anyway (it runs inside containers whose images may have no C
// library), and a file the operator can see, replace and version is simpler
// than one the agent writes out at start. The error says what to do.
func FindRunner(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("cannot find %s: this program's own path is unknown (%v); pass --runner PATH", RunnerName, err)
		}
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		path = filepath.Join(filepath.Dir(exe), RunnerName)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s not found at %s: install it next to podium-agent (`make build` puts both in bin/) "+
			"or pass --runner PATH (%v)", RunnerName, abs, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file: the runner must be the podium-runner binary", abs)
	}
	f, err := elf.Open(abs)
	if err != nil {
		return "", fmt.Errorf("%s is not a Linux executable (%v): build podium-runner for this machine", abs, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked, so it would not start in images without a C library: "+
				"build it with CGO_ENABLED=0 (`make build` does)", abs)
		}
	}
	return abs, nil
}

// Start accepts an assignment and runs it in the background. Before it
// returns it has emitted the PROVISIONING status, which is what tells the
// coordinator the node took the task; the last event of the run is exactly one
// terminal status, emitted after every byte of output.
//
// The run lives until the task ends or ctx ends. Ending ctx means the agent is
// stopping: a task whose container has started is left running, untouched,
// for the next agent process to Resume; one still being prepared is torn down
// (there is no runner log to resume from yet), and the next agent does not
// report it, so the coordinator applies its node-loss policy. No terminal
// status is emitted in either case.
//
// The returned channel is closed once the run has finished. An attempt that
// is already running here is not started again: Start returns
// attempt.ErrAlreadyRunning.
func (e *Executor) Start(ctx context.Context, a *podiumv1.Assign, emit attempt.Emit) (<-chan struct{}, error) {
	if a == nil || a.GetTaskId() == "" {
		return nil, errors.New("executor: assignment without a task id")
	}
	if emit == nil {
		return nil, errors.New("executor: Start needs an Emit function")
	}
	r, err := e.register(ctx, a, emit, attempt.Cursor{}, false)
	if err != nil {
		return nil, err
	}
	r.log.Info("task accepted", "assign", attempt.RedactAssign(a))
	// Its GPUs before the next assignment is looked at (gpus.go).
	r.takeGPUs()
	// The directory is made before the task counts as accepted, so that a
	// message sent while its image is still being pulled has an inbox to
	// go to. validate first: sidecar names become file names.
	if r.validate() == nil {
		r.prepErr = r.prepareDir()
		if r.prepErr == nil {
			r.prepErr = r.recordGPUs()
		}
	}
	r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_PROVISIONING}, false)
	go r.main(ctx, r.execute)
	return r.done, nil
}

// Resume takes over an attempt a previous agent process started, from the
// assignment and the newest cursor it stored. It finds the attempt's
// containers by their labels: a task still running is watched again, its
// output read on from the cursor; one that ended while no agent ran is
// finished from its runner log, which holds its exit status. Either way the
// run ends as a Start-ed one does. ErrNotResumable means there is nothing to
// take over.
func (e *Executor) Resume(ctx context.Context, a *podiumv1.Assign, cur attempt.Cursor, emit attempt.Emit) (<-chan struct{}, error) {
	if a == nil || a.GetTaskId() == "" {
		return nil, errors.New("executor: resume without a task id")
	}
	key := attempt.Of(a)
	ictx, cancel := context.WithTimeout(ctx, apiTimeout)
	info, err := e.docker.ContainerInspect(ictx, ContainerName(key))
	cancel()
	var found *container.InspectResponse
	switch {
	case err == nil:
		found = &info
		if info.State != nil && info.State.Status == "created" {
			return nil, fmt.Errorf("%w: the container of %s was created but never started", ErrNotResumable, key)
		}
	case isNotFound(err):
		exit, ferr := findExit(filepath.Join(e.dirOf(key), logFile), cur.Task)
		if ferr != nil || exit == nil {
			return nil, fmt.Errorf("%w: the container of %s is gone and its runner log has no exit status", ErrNotResumable, key)
		}
	default:
		return nil, fmt.Errorf("inspect the container of %s: %w", key, err)
	}
	r, err := e.register(ctx, a, emit, cur, true)
	if err != nil {
		return nil, err
	}
	if name := r.recordedNetwork(); name != "" {
		r.network = name
		e.pool.adopt(name)
	}
	r.restoreGPUs(found)
	r.log.Info("resuming a task a previous agent process started", "container_found", found != nil,
		"stdout_offset", cur.Task.Stdout, "stderr_offset", cur.Task.Stderr)
	go r.main(ctx, func(ctx context.Context) *podiumv1.StatusChange { return r.resume(ctx, found) })
	return r.done, nil
}

func findExit(path string, pos runlog.Position) (*runlog.Exit, error) {
	f, err := openRunnerLog(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return runlog.FindExit(f, pos)
}

// register creates a run and enters it in the table, refusing a duplicate.
func (e *Executor) register(ctx context.Context, a *podiumv1.Assign, emit attempt.Emit, cur attempt.Cursor, resumed bool) (*run, error) {
	key := attempt.Of(a)
	prepCtx, prepCancel := context.WithCancel(ctx)
	r := &run{
		e:          e,
		key:        key,
		assign:     a,
		spec:       a.GetSpec(),
		emitFn:     emit,
		log:        e.log.With("task_id", key.TaskID, "attempt", key.Attempt),
		prepCtx:    prepCtx,
		prepCancel: prepCancel,
		cancelled:  make(chan struct{}),
		done:       make(chan struct{}),
		dir:        e.dirOf(key),
		cur:        cur,
	}
	if r.spec == nil {
		r.spec = &podiumv1.TaskSpec{}
	}
	r.outputLimit = e.outputLimit
	if n := r.spec.GetOutputLimitBytes(); n > 0 {
		r.outputLimit = n // more than the maximum is refused by validate
	}
	r.capped.Store(cur.Capped)
	r.initSecrets(resumed)
	if r.sel, r.selErr = newSelection(r.spec); r.selErr != nil {
		r.sel, _ = newSelection(&podiumv1.TaskSpec{})
	}
	e.imageMu.Lock()
	defer e.imageMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.runs[key]; dup {
		prepCancel()
		return nil, fmt.Errorf("%w: %s", attempt.ErrAlreadyRunning, key)
	}
	e.runs[key] = r
	e.wg.Add(1)
	return r, nil
}

// Cancel stops a running task attempt: its stop signal (SIGTERM unless the
// image says otherwise), then SIGKILL after grace (0 means the task's
// cancel_grace_seconds, else DefaultGrace). The run ends with the terminal
// status CANCELLED and reason. A cancel that arrives before the container
// started aborts the preparation (an image pull, say) and still ends
// CANCELLED. attempt 0 matches whichever attempt of the task is running.
// Cancel does not wait for the container to stop; it reports whether a run was
// found.
func (e *Executor) Cancel(taskID string, attempt int32, reason string, grace time.Duration) bool {
	found := e.find(taskID, attempt)
	for _, r := range found {
		r.cancel(reason, grace)
	}
	return len(found) > 0
}

func (e *Executor) find(taskID string, attempt int32) []*run {
	e.mu.Lock()
	defer e.mu.Unlock()
	var found []*run
	for k, r := range e.runs {
		if k.TaskID == taskID && (attempt == 0 || k.Attempt == attempt) {
			found = append(found, r)
		}
	}
	return found
}

// Inject puts a message into a running attempt's inbox (package inbox),
// where `podium-runner ask` inside the task reads it. It reports false for a
// repeat of a message already delivered, and attempt.ErrNotRunning for an
// attempt this node does not run. The inbox is the task's to write, and
// package inbox reads and writes it without following links, opening
// anything but regular files or reading past a bound, so whatever the task
// left there Inject answers at once; a message it could not deliver is also
// noted in the task's log.
func (e *Executor) Inject(taskID string, n int32, messageID int64, text string) (bool, error) {
	found := e.find(taskID, n)
	if len(found) == 0 {
		return false, fmt.Errorf("%w: %s/%d", attempt.ErrNotRunning, taskID, n)
	}
	r := found[0]
	ok, err := inbox.Deliver(filepath.Join(r.dir, inboxDir), messageID, text)
	if err != nil {
		// Said in the task's log too: the person who sent the message reads
		// that, not the node's. The error names a file and what is wrong
		// with it, never what it holds (package inbox).
		r.note("message %d was not delivered to %s: %v", messageID, inbox.ContainerDir, err)
		return false, fmt.Errorf("write message %d into the inbox of %s: %w", messageID, r.key, err)
	}
	if ok {
		r.log.Info("message delivered to the task's inbox", "message_id", messageID, "bytes", len(text))
	}
	return ok, nil
}

// Lease moves the moment at which a running attempt's runner fences it
// (package runlog's lease file, on the host's boot clock), with the grace the
// command then gets. The session calls it each time a coordinator
// replica answers, for the attempts the control plane would run again
// elsewhere if the node went quiet, so that a hung agent's tasks stop on
// their own when it would have stopped them. An attempt not running here,
// or whose files are gone, is no error: there is nothing to fence.
func (e *Executor) Lease(taskID string, n int32, fenceAt time.Time, grace time.Duration) {
	for _, r := range e.find(taskID, n) {
		err := runlog.WriteLease(filepath.Join(r.dir, leaseFile), runlog.LeaseUntil(fenceAt, grace))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("could not renew the task's lease; its runner fences it when the old one runs out", "err", err)
		}
	}
}

// Running is how many task attempts are in progress; each holds a slot.
func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.runs)
}

// Tasks lists the task attempts in progress.
func (e *Executor) Tasks() []Key {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]Key, 0, len(e.runs))
	for k := range e.runs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].TaskID != keys[j].TaskID {
			return keys[i].TaskID < keys[j].TaskID
		}
		return keys[i].Attempt < keys[j].Attempt
	})
	return keys
}

// Wait blocks until every run started so far, and every upload ResumeUploads
// took over, has finished. After the context
// the runs were started with ends, this is how the agent waits for them to
// let go of their containers (which keep running) before it exits.
func (e *Executor) Wait() { e.wg.Wait() }

func (e *Executor) isUploading(k Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.uploading[k]
}

func (e *Executor) owns(k Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.runs[k]
	return ok
}

// RemoveOrphans removes the containers, networks, volumes and host
// directories of this node that no run owns: what an earlier agent process
// left of attempts it did not resume (they were lost, finished, or disowned).
// Call it once after resuming, and after ResumeUploads, whose directories it
// keeps, before accepting work.
func (e *Executor) RemoveOrphans(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var errs []error
	errs = append(errs, e.removeLabelled(ctx, filters.NewArgs(filters.Arg("label", LabelNode+"="+e.nodeID)), func(k Key) bool {
		if e.owns(k) {
			return false
		}
		e.log.Warn("removing what an earlier agent process left of a task attempt", "task_id", k.TaskID, "attempt", k.Attempt)
		return true
	}))
	if _, err := e.pool.removeStale(ctx); err != nil {
		errs = append(errs, err)
	}
	if _, err := e.SweepAttemptData(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeLabelled force-removes the containers, then the networks and volumes,
// that match f and whose attempt del approves. Containers go first because a
// network or volume in use cannot be removed.
func (e *Executor) removeLabelled(ctx context.Context, f filters.Args, del func(Key) bool) error {
	var errs []error
	decided := map[Key]bool{}
	ok := func(labels map[string]string) bool {
		k := Key{TaskID: labels[LabelTask]}
		if n, err := strconv.Atoi(labels[LabelAttempt]); err == nil {
			k.Attempt = int32(n)
		}
		d, seen := decided[k]
		if !seen {
			d = del(k)
			decided[k] = d
		}
		return d
	}
	cs, err := e.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("list this node's containers (is the Docker engine running?): %w", err)
	}
	for _, c := range cs {
		if !ok(c.Labels) {
			continue
		}
		if err := e.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s (remove it by hand with `docker rm -f %s`): %w", shortID(c.ID), shortID(c.ID), err))
		}
	}
	nets, err := e.docker.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		errs = append(errs, fmt.Errorf("list this node's networks: %w", err))
	}
	for _, n := range nets {
		// Pool networks carry no task's labels; which attempt holds one
		// is the pool's to know (netpool.go).
		if n.Labels[LabelPool] != "" || !ok(n.Labels) {
			continue
		}
		if err := e.docker.NetworkRemove(ctx, n.ID); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s (remove it by hand with `docker network rm %s`): %w", n.Name, n.Name, err))
			continue // its containers stay filtered while it exists
		}
		if br := n.Options[egress.BridgeOption]; e.egress != nil && egress.IsBridge(br) {
			if err := e.egress.Close(ctx, br); err != nil {
				errs = append(errs, err)
			}
		}
	}
	vols, err := e.docker.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		errs = append(errs, fmt.Errorf("list this node's volumes: %w", err))
	}
	for _, v := range vols.Volumes {
		if v == nil || !ok(v.Labels) {
			continue
		}
		if err := e.docker.VolumeRemove(ctx, v.Name, true); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("remove volume %s (remove it by hand with `docker volume rm %s`): %w", v.Name, v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ContainerName is the name of a task attempt's container. It is unique per
// attempt, so a second assignment of the same attempt cannot start a second
// container, and it tells a person at `docker ps` what they are looking at.
func ContainerName(k Key) string {
	return fmt.Sprintf("podium-%s-%d", k.TaskID, k.Attempt)
}

// NetworkName is the name of a task attempt's private network.
func NetworkName(k Key) string { return ContainerName(k) }

// BridgeName is the Linux bridge name of a task attempt's network when the
// executor has an egress filter: the interface its rules match.
func (e *Executor) BridgeName(k Key) string {
	return egress.BridgeName(e.nodeID + "/" + NetworkName(k))
}

// VolumeName is the name of a task attempt's workspace volume.
func VolumeName(k Key) string { return ContainerName(k) + "-workspace" }

// SidecarName is the container name of one of an attempt's sidecars.
func SidecarName(k Key, name string) string { return ContainerName(k) + "-" + name }

// dirOf is the host directory of an attempt within the tasks directory, named
// by attempt.FileName so that no task id can reach outside it.
func (e *Executor) dirOf(k Key) string { return filepath.Join(e.tasksDir, attempt.FileName(k)) }

// graceFor picks the grace period: an explicit one, else the task's own,
// else the executor's default.
func (e *Executor) graceFor(spec *podiumv1.TaskSpec, explicit time.Duration) time.Duration {
	if explicit > 0 {
		return explicit
	}
	if s := spec.GetCancelGraceSeconds(); s > 0 {
		return taskspec.Seconds(s)
	}
	return e.defaultGrace
}

func now() *timestamppb.Timestamp { return timestamppb.Now() }

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
