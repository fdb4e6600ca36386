// Package agent is the node agent: it wires the node's identity, its
// capacity, the Docker executor and the coordinator session into one process
// that runs until it is told to stop.
//
// The executor (package executor: tasks in Docker) and the session (package
// session: the stream to the coordinator) are siblings that do not import
// each other; both import package attempt, which holds what they share. This
// package is where they meet: it hands the executor to the session as the
// session's Runner, and the session's Emit to the runs it resumes after a
// restart.
//
// # Data directory
//
//	identity.json                  the node's id and key (package identity)
//	replicas.json                  the coordinator replicas last heard of,
//	                               tried when the enrolled one is down
//	images.json                    when each image was last used by a task
//	                               here, or first seen (package imagegc)
//	spool/<task>-<attempt>.spool   events not yet acknowledged, with the
//	                               executor's cursor (package spool)
//	tasks/<task>-<attempt>/        one directory per task attempt on this node:
//	  output.log                   the task's runner log (package runlog)
//	  output.progress              how far the agent has read it, for the
//	                               runner's back-pressure (package runlog)
//	  sidecars/<name>.log          each sidecar's runner log (and .progress)
//	  inbox/                       messages sent to the task (package inbox),
//	                               mounted at /run/podium/inbox
//	  artifacts/                   files the task leaves for upload (package
//	                               artifacts), mounted at
//	                               /workspace/.podium/artifacts
//	  stop.json                    why the agent is stopping the task, while it is
//	  gpus.json                    the UUIDs of the GPUs the attempt holds, so a
//	                               restarted agent keeps them its (gpus.go)
//	  done                         the attempt is over and its directory is kept
//	                               for debugging (--keep-attempt-data) from then
//
// An attempt's directory goes once the coordinator has stored its terminal
// status and its artifacts' uploads are done, or --keep-attempt-data after
// that; a sweep at start and every hour removes what is left of attempts
// the agent no longer holds. Images no task used for --image-gc-unused go,
// least recently used first, while the data disk or the engine's root has
// less than --image-gc-low-free free (package imagegc); the engine's build
// cache and the networks and volumes labelled by Podium that no attempt
// owns are swept at start and every hour.
//
// The directory must be on the Docker engine's own machine: the runner logs
// and the inbox are bind-mounted into the containers.
//
// # The runner
//
// podium-runner (package runner) is PID 1 of every task and sidecar
// container, bind-mounted read-only at /podium/podium-runner from the
// podium-runner file next to podium-agent (or --runner). It writes the
// container's output to the runner log, so tasks outlive the agent: stopping
// the agent (SIGTERM, a crash, an upgrade) leaves them running, and the next
// agent resumes each from the byte it had reached. Inside a task, PATH ends
// with /podium, so `podium-runner ask` prints the next message sent with
// `podium task send`, and `podium-runner artifact add FILE` publishes a file
// as an artifact.
//
// # Artifacts
//
// When a task's container exits, the agent uploads the regular files it left
// under /workspace/.podium/artifacts to the coordinator, named by their path
// there (package artifacts, package artifacts/upload), with the same HTTP
// client and dialer as its stream. A failed upload never fails the task: the
// agent retries while the coordinator answers Unavailable, for up to the
// coordinator's 10-minute window, and keeps the task's directory until then.
// Uploads still waiting for a retry when the agent stops are dropped.
//
// # Egress
//
// With Config.EgressFilter (podium-agent's default) every task network gets
// iptables rules (package egress) that refuse link-local, this host's and
// tailnet addresses, less Config.AllowEgress and the ranges of a spec's
// allow_egress that Config.PermitEgress covers. The node reports what it
// permits in its capacity (limits.permit_egress), so the coordinator places
// a task that asks for a range only where it may have it; without the filter
// it reports everything (0.0.0.0/0 and ::/0), since nothing is refused.
//
// # What a person sees in the task's log
//
// The task's stdout and stderr, byte for byte; Podium's notes ("pulling
// IMAGE", "sidecar db is ready", "artifact NAME: upload failed: … (will
// retry)"); and each line a sidecar prints as a note
// of its own, "[db] listening on port 5432", shown by `podium logs` and
// `podium run` as "→ [db] listening on port 5432" on stderr.
//
// All of it up to the attempt's output limit (--output-limit, or the spec's
// output_limit up to --max-output-limit): past it the rest is dropped, with a
// note. Output waiting for the coordinator is bounded in memory
// (--pending-memory) and in the spool (--pending-disk); past either, tasks
// that print are held back rather than buffered (docs/protocol.md, "Output:
// limits and back-pressure").
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/docker/docker/client"
	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/agent/artifacts/upload"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/capacity"
	"github.com/podiumhq/podium/agent/egress"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/gpu"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/imagegc"
	"github.com/podiumhq/podium/agent/session"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultDataDir is where the agent keeps its identity when neither
// --data-dir nor PODIUM_AGENT_DATA_DIR says otherwise.
const DefaultDataDir = "/var/lib/podium-agent"

// DataDirEnv names the environment variable that overrides DefaultDataDir.
const DataDirEnv = "PODIUM_AGENT_DATA_DIR"

// DataDirFromEnv is the data directory to use when no flag names one.
func DataDirFromEnv() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	return DefaultDataDir
}

// Config is what an Agent needs.
type Config struct {
	// DataDir holds identity.json, the spool (spool/) and the tasks' host
	// directories (tasks/); its disk is the disk capacity reports.
	DataDir string
	// MaxTasks is how many tasks run at once; 0 means one per CPU.
	MaxTasks int
	// MinFreeDiskMB is the data disk's free-space floor: below it the node
	// takes no new task (it gives each assignment back, and its heartbeats
	// say since when it is below, so the scheduler places nothing there);
	// 0 disables the check. podium-agent's default is DefaultMinFreeDiskMB.
	MinFreeDiskMB int64
	// Logger is the one logger everything logs through; nil means
	// slog.Default().
	Logger *slog.Logger
	// Docker overrides the engine client built from the environment
	// (DOCKER_HOST and friends).
	Docker *client.Client
	// Coordinators are more coordinator addresses to try, after the one the
	// node enrolled with and before the replicas it last heard of (kept in
	// replicas.json in DataDir).
	Coordinators []string
	// Hostname is the name Hello reports. Empty means the one saved at
	// enrollment (identity.Identity.Hostname), or os.Hostname() for an
	// identity saved without one.
	Hostname string
	// RunnerPath is the podium-runner binary; empty means podium-runner
	// next to this program (see executor.FindRunner).
	RunnerPath string
	// ExitOnDrain makes Run return nil once the node is draining and its
	// last task has ended and been reported: the upgrade path.
	ExitOnDrain bool
	// MetricsListen, when set, serves Prometheus metrics at /metrics on that
	// address (for example 127.0.0.1:9464).
	MetricsListen string
	// EgressFilter keeps tasks from link-local (cloud metadata), this
	// host's and tailnet addresses (package egress). New fails when the
	// filter cannot work here: no iptables, or not root.
	EgressFilter bool
	// AllowEgress are ranges opened for every task; PermitEgress are those
	// a spec's allow_egress may open, reported to the coordinator so it
	// places such tasks only here. Both need EgressFilter.
	AllowEgress  []netip.Prefix
	PermitEgress []netip.Prefix
	// Limits are the defaults and maxima every task runs under
	// (podium-agent --default-*, --max-*, --workspace-limit); the node
	// reports the maxima with its capacity so the scheduler places by them.
	Limits executor.Limits
	// OutputLimit is the output an attempt keeps when its spec sets no
	// limit, MaxOutputLimit the most a spec may ask for (0: the executor's
	// defaults, see executor.Config).
	OutputLimit, MaxOutputLimit int64
	// PendingMemory and PendingDisk bound the task output waiting for the
	// coordinator's acknowledgement, in memory and in the spool; past
	// either, tasks' output is held back (0: the session's defaults).
	PendingMemory int
	PendingDisk   int64
	// DiskFullAfter is how long a task's output may find the data disk
	// full before the task is stopped ("node disk full"; 0: the
	// executor's default).
	DiskFullAfter time.Duration
	// FDWait is how long a task that finds too few file descriptors to
	// start waits for them before it fails ("node out of file
	// descriptors"; 0: the executor's default).
	FDWait time.Duration
	// ImageGCUnused is how long an image must go unused by this node's
	// tasks before it may be removed (0: imagegc.DefaultUnused), and
	// ImageGCLowFree the share of free space (percent) on the data disk or
	// the engine's root under which such images are removed, least
	// recently used first. 0 never removes an image (the command's
	// default is imagegc.DefaultLowFree). ImageKeep are images never
	// removed. See package imagegc.
	ImageGCUnused  time.Duration
	ImageGCLowFree float64
	ImageKeep      []imagegc.Pattern
	// KeepAttemptData keeps an attempt's directory that long, for
	// debugging, once its status is stored and its uploads are done; 0
	// removes it then.
	KeepAttemptData time.Duration
	// NetworkPool is how many task networks the executor keeps made ahead
	// of the tasks (executor.Config.NetworkPool); 0 keeps none.
	NetworkPool int
	// AllowPrivilegedSidecars runs sidecars whose spec asks to be
	// privileged (Docker-in-Docker), and says so in Hello so that the
	// scheduler sends such tasks here; off, the node gets none and refuses
	// one that comes anyway (executor.Config.AllowPrivilegedSidecars).
	AllowPrivilegedSidecars bool
	// NvidiaSMI is the nvidia-smi the node's GPUs are discovered with (at
	// start and on SIGHUP, see gpus.go); empty looks for it on PATH, and a
	// machine without it has no GPUs.
	NvidiaSMI string
}

// Agent is one node agent process.
type Agent struct {
	connected atomic.Bool
	cfg       Config
	log       *slog.Logger
	id        *identity.Identity
	docker    *client.Client
	ownsDock  bool
	exec      *executor.Executor
	sess      *session.Session
	gc        *imagegc.Collector
	// gpus are the node's GPUs and which attempt holds each (gpus.go).
	gpus *gpu.Allocator
}

// New loads the node's identity and prepares the agent. It fails, with the
// command that fixes it, when the node is not enrolled.
//
// It builds the parts in the order they depend on each other: the identity
// and the runner binary, the artifact uploader, the Docker client, the image
// collector, the egress filter, the executor, and last the session, which runs tasks with the
// executor. Parts made earlier reach those made later only through closures
// that are called once Run has started.
func New(cfg Config) (*Agent, error) {
	a, err := load(cfg)
	if err != nil {
		return nil, err
	}
	runnerPath, err := executor.FindRunner(a.cfg.RunnerPath)
	if err != nil {
		return nil, err
	}
	uploader, err := upload.New(upload.Config{
		NodeID: a.id.NodeID, NodeKey: a.id.NodeKey,
		// The session exists by the time a task has ended.
		Coordinator: func() (connect.HTTPClient, string, error) { return a.sess.Coordinator() },
		Logger:      a.log.With("component", "artifacts"),
	})
	if err != nil {
		return nil, err
	}
	if err := a.openDocker(); err != nil {
		return nil, err
	}
	if err := a.newCollector(); err != nil {
		return nil, err
	}
	filter, permit, err := a.newEgress()
	if err != nil {
		return nil, err
	}
	if a.cfg.AllowPrivilegedSidecars {
		a.log.Warn("privileged sidecars are allowed (--allow-privileged-sidecars): a task's sidecar may run as root on this machine")
		warnIfPrivilegedCannotRun(a.log)
	}
	if err := a.newExecutor(runnerPath, uploader, filter); err != nil {
		return nil, err
	}
	if err := a.newSession(permit); err != nil {
		return nil, err
	}
	return a, nil
}

// load fills in cfg's defaults, refuses what is wrong in it, and loads the
// node's identity: the first phase of New.
func load(cfg Config) (*Agent, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DataDirFromEnv()
	}
	if cfg.MaxTasks < 0 {
		return nil, fmt.Errorf("max tasks is %d; use a positive number, or 0 for one per CPU", cfg.MaxTasks)
	}
	if cfg.MaxTasks == 0 {
		cfg.MaxTasks = runtime.NumCPU()
	}
	id, err := identity.Load(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Hostname == "" {
		cfg.Hostname = id.Hostname
	}
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	return &Agent{cfg: cfg, log: log.With("node_id", id.NodeID), id: id, docker: cfg.Docker, gpus: gpu.NewAllocator()}, nil
}

// openDocker makes the engine client from the environment unless
// Config.Docker gave one; Run closes a client it made.
func (a *Agent) openDocker() error {
	if a.docker != nil {
		return nil
	}
	var err error
	a.docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("configure the Docker client (check DOCKER_HOST): %w", err)
	}
	a.ownsDock = true
	return nil
}

// newCollector makes the image collector (package imagegc).
func (a *Agent) newCollector() error {
	var err error
	a.gc, err = imagegc.New(imagegc.Config{
		Docker:  a.docker,
		DataDir: a.cfg.DataDir,
		Unused:  a.cfg.ImageGCUnused,
		LowFree: a.cfg.ImageGCLowFree,
		Keep:    a.cfg.ImageKeep,
		Protect: ownImage(a.docker),
		// The executor is made next; the collector runs only once Run
		// has started.
		Hold:   func(f func([]string)) { a.exec.HoldImages(f) },
		Logger: a.log.With("component", "imagegc"),
	})
	return err
}

// newEgress makes the egress filter, nil when Config.EgressFilter is off,
// and returns the ranges a spec may ask for, which the node reports.
func (a *Agent) newEgress() (*egress.Filter, []string, error) {
	cfg := a.cfg
	if !cfg.EgressFilter {
		a.log.Warn("the task egress filter is off: tasks can reach link-local (cloud metadata), this host's and tailnet addresses")
		// Without the filter nothing is refused, so a spec may ask for
		// any range.
		permit := []string{}
		for _, p := range egress.Everything {
			permit = append(permit, p.String())
		}
		return nil, permit, nil
	}
	filter, err := egress.New(context.Background(), egress.Config{
		Allow: cfg.AllowEgress, Permit: cfg.PermitEgress, Logger: a.log.With("component", "egress"),
	})
	if err != nil {
		return nil, nil, err
	}
	return filter, filter.PermitEgress(), nil
}

// newExecutor makes the executor that runs tasks in Docker; uploader is
// what it hands their artifacts to.
func (a *Agent) newExecutor(runnerPath string, uploader *upload.Uploader, filter *egress.Filter) error {
	cfg := a.cfg
	var err error
	a.exec, err = executor.New(executor.Config{
		Docker:     a.docker,
		NodeID:     a.id.NodeID,
		RunnerPath: runnerPath,
		TasksDir:   filepath.Join(cfg.DataDir, "tasks"),
		Logger:     a.log.With("component", "executor"),
		Artifacts:  uploader,
		Egress:     filter,
		Limits:     cfg.Limits,
		// Output limits and the runner logs' backlog: see package
		// executor's output.go.
		OutputLimit:    cfg.OutputLimit,
		MaxOutputLimit: cfg.MaxOutputLimit,
		DiskFullAfter:  cfg.DiskFullAfter,
		FDWait:         cfg.FDWait,
		// Image uses go to the collector's record; a task's end may make
		// its images unneeded, which the collector looks at if the disk
		// is short.
		ImageUsed:       func(id string) { a.gc.Used(id, time.Now()) },
		Ended:           a.gc.Kick,
		KeepAttemptData: cfg.KeepAttemptData,
		NetworkPool:     cfg.NetworkPool,
		GPUs:            a.gpus,

		AllowPrivilegedSidecars: cfg.AllowPrivilegedSidecars,
		// The session is made after the executor, which it runs tasks
		// with; by the time a run asks, it is there.
		Stored: func(k executor.Key, seq uint64) bool { return a.sess.Stored(k, seq) },
	})
	return err
}

// newSession makes the session to the coordinator, which runs the tasks it
// is given with the executor; permit are the egress ranges the node reports.
func (a *Agent) newSession(permit []string) error {
	cfg := a.cfg
	replicas, err := identity.LoadReplicas(cfg.DataDir)
	if err != nil {
		a.log.Warn("ignoring the kept list of coordinator replicas; the coordinator sends a new one", "err", err)
	}
	floor := &diskFloor{dir: cfg.DataDir, floorMB: cfg.MinFreeDiskMB, log: a.log}
	engine := &engineWatch{answers: a.exec.EngineAnswers, host: a.docker.DaemonHost(), log: a.log}
	a.sess, err = session.New(session.Config{
		CoordinatorURL: a.id.CoordinatorURL,
		Coordinators:   cfg.Coordinators,
		Replicas:       replicas,
		OnReplicas: func(urls []string) {
			if err := identity.SaveReplicas(cfg.DataDir, urls); err != nil {
				a.log.Warn("could not keep the list of coordinator replicas; a restart will know only the configured ones", "err", err)
			}
		},
		NodeID:        a.id.NodeID,
		NodeKey:       a.id.NodeKey,
		Hostname:      cfg.Hostname,
		AgentVersion:  version.Version,
		MaxTasks:      cfg.MaxTasks,
		MinFreeDiskMB: cfg.MinFreeDiskMB,
		Runner:        a.exec,
		Refuse: func(as *podiumv1.Assign) string {
			why := floor.refusal()
			if why == "" {
				why = engine.refusal(context.Background())
			}
			if why != "" {
				// The scheduler learns it from the next heartbeat; send
				// it now, so it stops offering this node tasks.
				a.sess.HeartbeatNow()
				return why
			}
			return a.exec.GPURefusal(as)
		},
		Capacity: func(ctx context.Context) *podiumv1.Capacity {
			c := capacity.Measure(ctx, cfg.DataDir, a.log)
			floor.report(c)
			engine.report(ctx, c)
			c.Limits = a.exec.Limits().TaskLimits()
			c.Limits.PermitEgress = permit
			c.Gpus = a.reportedGPUs()
			return withMaxOutput(c, a.exec.MaxOutputLimit())
		},
		Logger:      a.log.With("component", "session"),
		OnState:     a.onState,
		SpoolDir:    filepath.Join(cfg.DataDir, "spool"),
		ExitOnDrain: cfg.ExitOnDrain,

		MaxPendingBytes: cfg.PendingMemory,
		MaxSpoolBytes:   cfg.PendingDisk,

		AllowPrivilegedSidecars: cfg.AllowPrivilegedSidecars,
	})
	return err
}

// withMaxOutput adds the most output a spec may ask for to the node's limits
// in c, which the scheduler places by.
func withMaxOutput(c *podiumv1.Capacity, maxOutput int64) *podiumv1.Capacity {
	if c.Limits == nil {
		c.Limits = &podiumv1.TaskLimits{}
	}
	c.Limits.MaxOutputBytes = maxOutput
	return c
}

// NodeID is the enrolled node's id.
func (a *Agent) NodeID() string { return a.id.NodeID }

// Run runs the agent until ctx ends (the command cancels it on SIGTERM and
// SIGINT), or, with ExitOnDrain, until the node is drained. It returns nil
// then, and an error only when the agent cannot work at all.
//
// Stopping the agent leaves its tasks running: their containers are not the
// agent's children, their output keeps going to their runner logs on disk,
// and the next agent process resumes them where this one stopped (see
// resume). That is what makes restarting or upgrading an agent safe in the
// middle of a long task.
func (a *Agent) Run(ctx context.Context) error {
	if a.ownsDock {
		defer a.docker.Close()
	}
	if err := a.pingEngine(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the engine
		}
		return err
	}
	a.takeOver(ctx)
	// After takeOver's RemoveOrphans, which removes the pool networks an
	// earlier process left; the networks no task took go as the agent
	// stops.
	a.exec.StartPool(ctx)
	defer a.exec.StopPool()
	a.logStart()

	// Registered before the session says Hello: from then on SIGHUP is
	// the agent's to handle, never the default that ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The metrics address is taken before anything runs, so that one in
	// use stops the agent at once, saying so.
	var metrics *metricsServer
	if a.cfg.MetricsListen != "" {
		var err error
		if metrics, err = a.listenMetrics(a.cfg.MetricsListen); err != nil {
			return err
		}
	}

	// The parts run under one group. The stop order: the session first
	// (ctx ends, or the node is drained), which then waits for the last
	// runs; then the parts that serve it (stopParts), so that systemd's
	// watchdog is fed and the metrics are served until the runs have
	// ended. A part's error stops them all and names the part.
	g, gctx := errgroup.WithContext(ctx)
	partsCtx, stopParts := context.WithCancel(gctx)
	defer stopParts()
	part := func(ctx context.Context, name string, run func(context.Context) error) {
		g.Go(func() error {
			if err := run(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	part(partsCtx, "systemd watchdog", a.watchdog)
	part(partsCtx, "GPU rediscovery on SIGHUP", func(ctx context.Context) error { return a.rediscoverOnHangup(ctx, hup) })
	part(partsCtx, "image collector", a.gc.Run)
	part(partsCtx, "housekeeping", a.housekeeping)
	if metrics != nil {
		part(partsCtx, "metrics server", metrics.Run)
	}
	part(gctx, "coordinator session", func(ctx context.Context) error {
		defer stopParts()
		return a.runSession(ctx)
	})
	err := g.Wait()
	a.log.Info("podium agent stopped")
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// pingEngine makes sure the Docker engine answers before anything starts.
func (a *Agent) pingEngine(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := a.docker.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("the Docker engine does not answer (%v): start it (systemctl start docker) "+
			"and make sure this user may use it (the docker group, or DOCKER_HOST)", err)
	}
	return nil
}

// takeOver finds the node's GPUs and takes over what an earlier agent
// process left: its task attempts, their pending uploads, and what no
// attempt owns any more.
func (a *Agent) takeOver(ctx context.Context) {
	a.discoverGPUs(ctx)
	a.resume(ctx)
	a.exec.ResumeUploads(ctx, a.sess.Emit, a.sess.ContinueAfter)
	if err := a.exec.RemoveOrphans(ctx); err != nil {
		a.log.Warn("could not clean up what an earlier agent process left behind", "err", err)
	}
}

// logStart says what the agent starts with.
func (a *Agent) logStart() {
	l := a.exec.Limits()
	a.log.Info("podium agent starting", "version", version.Version, "coordinator", a.id.CoordinatorURL,
		"max_tasks", a.cfg.MaxTasks, "data_dir", a.cfg.DataDir,
		slog.Group("task_defaults", "cpu", l.DefaultCPU, "memory_mb", l.DefaultMemoryMB, "pids", l.DefaultPids,
			"timeout", l.DefaultTimeout, "user", l.DefaultUser),
		slog.Group("task_maxima", "cpu", l.MaxCPU, "memory_mb", l.MaxMemoryMB, "pids", l.MaxPids, "timeout", l.MaxTimeout),
		"workspace_limit_bytes", l.WorkspaceBytes)
}

// runSession runs the session until ctx ends or, with ExitOnDrain, the node
// is drained, then waits for the runs to let go of their tasks. A drained
// node is not an error: it returns nil then.
func (a *Agent) runSession(ctx context.Context) error {
	err := a.sess.Run(ctx)
	if errors.Is(err, session.ErrDrained) {
		// Every task has ended and been reported, but the artifacts of the
		// last ones may still be uploading; the watchdog keeps being fed
		// meanwhile, and SIGTERM (ctx) cuts the wait short.
		waited := make(chan struct{})
		go func() { a.exec.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(time.Second):
			a.log.Info("the node is drained; waiting for its last tasks' artifacts to upload before exiting")
			<-waited
		}
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	if errors.Is(err, session.ErrDrained) {
		a.log.Info("podium agent exiting: the node is drained (--exit-on-drain)")
		err = nil
	} else {
		a.log.Info("podium agent stopping; its tasks keep running and are resumed when it starts again",
			"running", a.exec.Running())
	}
	// The runs end with ctx: they let go of their containers and return.
	a.exec.Wait()
	return err
}

// resume takes over the task attempts an earlier agent process left in the
// spool. Those with nothing left to take over are dropped before the first
// Hello, so the coordinator does not hear of them and applies its node-loss
// policy; the rest are reported in Hello and kept or cancelled as HelloAck
// says.
func (a *Agent) resume(ctx context.Context) {
	for _, r := range a.sess.Recovered() {
		as := r.Assign
		log := a.log.With("task_id", as.GetTaskId(), "attempt", as.GetAttempt())
		cur, err := attempt.ParseCursor(r.Cursor)
		if err != nil {
			log.Error("the spool holds a cursor this agent cannot read; the task is given up", "err", err)
			a.sess.Drop(as.GetTaskId(), as.GetAttempt())
			continue
		}
		done, err := a.exec.Resume(ctx, as, cur, a.sess.Emit)
		for try := 1; err != nil && !errors.Is(err, executor.ErrNotResumable) && try < 3 && ctx.Err() == nil; try++ {
			// The engine did not answer; giving the task up on one failed
			// call would lose it for nothing.
			log.Warn("could not look at a task an earlier agent process ran; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * time.Second):
			}
			done, err = a.exec.Resume(ctx, as, cur, a.sess.Emit)
		}
		if err != nil {
			log.Warn("cannot resume a task an earlier agent process ran; the coordinator will treat it as lost", "err", err)
			a.sess.Drop(as.GetTaskId(), as.GetAttempt())
			continue
		}
		a.sess.Track(done)
	}
}

// onState reports the connection to systemd: READY=1 once the first Hello is
// answered (a unit ordered after podium-agent then really has a working
// node), and a STATUS= line an operator sees in `systemctl status`.
func (a *Agent) onState(st session.State) {
	a.connected.Store(st.Connected)
	var status string
	switch {
	case st.Connected:
		status = fmt.Sprintf("connected to %s (replica %s), %d task(s) running", st.Coordinator, st.Replica, a.exec.Running())
		if st.Draining {
			status += ", draining"
		}
		_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
	case st.Err != nil:
		status = fmt.Sprintf("reconnecting to %s (%v), %d task(s) running", st.Coordinator, st.Err, a.exec.Running())
	default:
		status = fmt.Sprintf("disconnected from %s", st.Coordinator)
	}
	_, _ = daemon.SdNotify(false, "STATUS="+status)
}

// watchdog pings systemd's watchdog, when the unit has one, at half its
// interval, so a hung agent is restarted by systemd. It runs until ctx ends
// and returns nil: a ping that fails is systemd's to act on.
func (a *Agent) watchdog(ctx context.Context) error {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		}
	}
}

// ownImage is the image the agent runs from, when it runs in a container of
// the engine it uses: the collector never removes it.
func ownImage(docker *client.Client) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if id := imagegc.OwnImage(ctx, docker); id != "" {
		return []string{id}
	}
	return nil
}

// housekeeping sweeps what no task holds any more, until ctx ends: the
// attempt directories past --keep-attempt-data (every
// executor.SweepInterval), and, at start and every hour, the labelled
// networks and volumes no attempt owns and the engine's build cache. The
// images are the collector's (package imagegc), which runs on its own.
//
// A sweep that fails is logged and tried again, never fatal: what is left
// only takes disk space, and the node's disk floor guards that. It returns
// nil when ctx ends.
func (a *Agent) housekeeping(ctx context.Context) error {
	every := a.exec.SweepInterval()
	// The first sweep of attempt directories comes soon after start: those
	// an earlier process left with their terminal status not yet stored
	// (RemoveOrphans keeps them) go once the coordinator has it.
	t := time.NewTimer(min(every, time.Minute))
	defer t.Stop()
	var engineSwept time.Time
	for {
		if time.Since(engineSwept) >= time.Hour {
			engineSwept = time.Now()
			if _, err := a.exec.SweepDangling(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("could not sweep the networks and volumes no task owns; trying again in an hour", "err", err)
			}
			a.gc.PruneBuildCache(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			t.Reset(every)
		}
		if _, err := a.exec.SweepAttemptData(); err != nil {
			a.log.Warn("could not sweep the directories of finished task attempts", "err", err)
		}
	}
}
