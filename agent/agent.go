// Package agent is the node agent: it wires the node's identity, its
// capacity, the Docker executor and the coordinator session into one process
// that runs until it is told to stop.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/agent/capacity"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Version is the agent's version, reported at enrollment and in every Hello.
// Release builds set it with -ldflags "-X github.com/podiumhq/podium/agent.Version=...".
var Version = "dev"

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
	// DataDir holds identity.json; its disk is the disk capacity reports.
	DataDir string
	// MaxTasks is how many tasks run at once; 0 means one per CPU.
	MaxTasks int
	// MinFreeDiskMB stops the node taking work while the data disk has less
	// free space; 0 disables the check.
	MinFreeDiskMB int64
	// Logger is the one logger everything logs through; nil means
	// slog.Default().
	Logger *slog.Logger
	// Docker overrides the engine client built from the environment
	// (DOCKER_HOST and friends).
	Docker *client.Client
	// Hostname overrides os.Hostname() in Hello.
	Hostname string
	// ShutdownGrace is how long running tasks get to stop when the agent
	// stops; 0 means executor.DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// Agent is one node agent process.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	id       *identity.Identity
	docker   *client.Client
	ownsDock bool
	exec     *executor.Executor
	sess     *session.Session
}

// New loads the node's identity and prepares the agent. It fails, with the
// command that fixes it, when the node is not enrolled.
func New(cfg Config) (*Agent, error) {
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
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	id, err := identity.Load(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: log.With("node_id", id.NodeID), id: id, docker: cfg.Docker}
	if a.docker == nil {
		a.docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("configure the Docker client (check DOCKER_HOST): %w", err)
		}
		a.ownsDock = true
	}
	a.exec, err = executor.New(executor.Config{
		Docker:        a.docker,
		NodeID:        id.NodeID,
		Logger:        a.log.With("component", "executor"),
		ShutdownGrace: cfg.ShutdownGrace,
	})
	if err != nil {
		return nil, err
	}
	a.sess, err = session.New(session.Config{
		CoordinatorURL: id.CoordinatorURL,
		NodeID:         id.NodeID,
		NodeKey:        id.NodeKey,
		Hostname:       cfg.Hostname,
		AgentVersion:   Version,
		MaxTasks:       cfg.MaxTasks,
		MinFreeDiskMB:  cfg.MinFreeDiskMB,
		Runner:         a.exec,
		Capacity: func(ctx context.Context) *podiumv1.Capacity {
			return capacity.Measure(ctx, cfg.DataDir, a.log)
		},
		Logger:  a.log.With("component", "session"),
		OnState: a.onState,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// NodeID is the enrolled node's id.
func (a *Agent) NodeID() string { return a.id.NodeID }

// Run runs the agent until ctx ends (the command cancels it on SIGTERM and
// SIGINT). Then it stops and removes the tasks' containers (see
// executor.Executor.Start for why they are not left running) and returns nil.
// It returns an error only when the agent cannot work at all.
func (a *Agent) Run(ctx context.Context) error {
	if a.ownsDock {
		defer a.docker.Close()
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := a.docker.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the Docker engine does not answer (%v): start it (systemctl start docker) "+
			"and make sure this user may use it (the docker group, or DOCKER_HOST)", err)
	}
	if err := a.exec.RemoveOrphans(ctx); err != nil {
		a.log.Warn("could not clean up containers left by an earlier agent process", "err", err)
	}

	a.log.Info("podium agent starting", "version", Version, "coordinator", a.id.CoordinatorURL,
		"max_tasks", a.cfg.MaxTasks, "data_dir", a.cfg.DataDir)
	var wg sync.WaitGroup
	wctx, stopWatchdog := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.watchdog(wctx)
	}()

	err = a.sess.Run(ctx)
	stopWatchdog()
	wg.Wait()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	a.log.Info("podium agent stopping; stopping running tasks", "running", a.exec.Running())
	a.exec.Wait()
	a.log.Info("podium agent stopped")
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// onState reports the connection to systemd: READY=1 once the first Hello is
// answered (a unit ordered after podium-agent then really has a working
// node), and a STATUS= line an operator sees in `systemctl status`.
func (a *Agent) onState(st session.State) {
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
// interval, so a hung agent is restarted by systemd.
func (a *Agent) watchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		}
	}
}
