// Package executor runs the tasks assigned to this node in the local Docker
// engine and turns what happens to them into the task events the coordinator
// stores: status changes, byte-exact output chunks and notes.
//
// The executor knows nothing about the coordinator. It is handed an assignment
// and a function to emit events into; numbering, batching, acknowledging and
// re-sending those events belong to the session that owns the stream.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Labels every container the executor creates carries. They are how a person
// running `docker ps` tells which task a container belongs to, and how the
// agent finds containers it left behind.
const (
	LabelTask    = "podium.task"
	LabelAttempt = "podium.attempt"
	LabelNode    = "podium.node"
)

// DefaultGrace is how long a stopped task gets between SIGTERM and SIGKILL
// when neither the cancel nor the task's spec says otherwise (DESIGN.md §3).
const DefaultGrace = 30 * time.Second

// DefaultShutdownGrace is the grace period tasks get when the agent itself is
// stopping. It is shorter than DefaultGrace so that a systemd stop, which
// waits 90 s by default before killing the agent, still sees every container
// removed.
const DefaultShutdownGrace = 10 * time.Second

// ReasonTimeout is the reason of a task stopped because it ran longer than its
// spec's timeout_seconds.
const ReasonTimeout = "timeout"

// apiTimeout bounds every engine call that is not open-ended (create, start,
// inspect, remove). An engine that does not answer in this long is wedged,
// and a run stuck on it forever would hold a slot forever.
const apiTimeout = 2 * time.Minute

// ErrAlreadyRunning is returned by Start for a task attempt the executor is
// already running. A coordinator may repeat an assignment after a reconnect;
// running it twice would run the user's task twice.
var ErrAlreadyRunning = errors.New("executor: task attempt is already running on this node")

// Emit receives a run's events. The executor fills task_id, attempt, time and
// the body; the caller assigns seq. It may be called from several goroutines
// of one run at once (stdout and stderr are read concurrently) and must be
// safe for that; within one output stream, and for status changes, calls
// happen in order. Emit may block to push back on a task that writes faster
// than its output can be shipped: the container's writes then block too, which
// is better than holding an unbounded amount of output in memory.
type Emit func(*podiumv1.TaskEvent)

// Key names one attempt of one task. Two attempts of the same task can be on
// one node at once, briefly: the old one is being torn down while the new one
// starts.
type Key struct {
	TaskID  string
	Attempt int32
}

func (k Key) String() string { return k.TaskID + "/" + strconv.Itoa(int(k.Attempt)) }

// Config is what an Executor needs.
type Config struct {
	// Docker is the engine client. Create it with client.FromEnv and
	// client.WithAPIVersionNegotiation so older engines (Debian's 20.10 speaks
	// API 1.41) work.
	Docker *client.Client
	// NodeID is written into every container's labels.
	NodeID string
	// Logger receives the executor's own log; nil means slog.Default().
	Logger *slog.Logger
	// Output is where task output is read from; nil means AttachSource.
	Output OutputSource
	// DefaultGrace applies when neither a cancel nor the spec sets one; 0
	// means DefaultGrace.
	DefaultGrace time.Duration
	// ShutdownGrace applies when the context a run was started with ends;
	// 0 means DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// Executor runs task attempts in Docker. It is safe for concurrent use.
type Executor struct {
	docker        *client.Client
	nodeID        string
	log           *slog.Logger
	output        OutputSource
	defaultGrace  time.Duration
	shutdownGrace time.Duration

	mu   sync.Mutex
	runs map[Key]*run
	wg   sync.WaitGroup
}

// New returns an executor. It does not contact the engine; a missing engine
// shows up as failed tasks whose reason says so.
func New(cfg Config) (*Executor, error) {
	if cfg.Docker == nil {
		return nil, errors.New("executor: Config.Docker is nil")
	}
	e := &Executor{
		docker:        cfg.Docker,
		nodeID:        cfg.NodeID,
		log:           cfg.Logger,
		output:        cfg.Output,
		defaultGrace:  cfg.DefaultGrace,
		shutdownGrace: cfg.ShutdownGrace,
		runs:          make(map[Key]*run),
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.output == nil {
		e.output = AttachSource{Docker: cfg.Docker}
	}
	if e.defaultGrace <= 0 {
		e.defaultGrace = DefaultGrace
	}
	if e.shutdownGrace <= 0 {
		e.shutdownGrace = DefaultShutdownGrace
	}
	return e, nil
}

// Start accepts an assignment and runs it in the background. Before it
// returns it has emitted the PROVISIONING status, which is what tells the
// coordinator the node took the task; the last event of the run is exactly one
// terminal status, emitted after every byte of output.
//
// The run lives until the task ends or ctx ends. Ending ctx means the agent is
// shutting down: the container is stopped with the shutdown grace and removed,
// and no terminal status is emitted, because the task did not fail — its node
// went away. The coordinator learns that from the next Hello (which no longer
// lists the task) or from the watchdog, and applies its node-loss policy.
// Leaving containers running across an agent restart needs the runner's
// on-host log to resume output from; until then, stopping them is the honest
// choice.
//
// The returned channel is closed once the run has finished and its terminal
// event (if any) was emitted.
func (e *Executor) Start(ctx context.Context, a *podiumv1.Assign, emit Emit) (<-chan struct{}, error) {
	if a == nil || a.GetTaskId() == "" {
		return nil, errors.New("executor: assignment without a task id")
	}
	if emit == nil {
		return nil, errors.New("executor: Start needs an Emit function")
	}
	key := Key{TaskID: a.GetTaskId(), Attempt: a.GetAttempt()}
	prepCtx, prepCancel := context.WithCancel(ctx)
	r := &run{
		e:          e,
		key:        key,
		assign:     a,
		emitFn:     emit,
		log:        e.log.With("task_id", key.TaskID, "attempt", key.Attempt),
		prepCtx:    prepCtx,
		prepCancel: prepCancel,
		cancelled:  make(chan struct{}),
		done:       make(chan struct{}),
	}

	e.mu.Lock()
	if _, dup := e.runs[key]; dup {
		e.mu.Unlock()
		prepCancel()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyRunning, key)
	}
	e.runs[key] = r
	e.wg.Add(1)
	e.mu.Unlock()

	r.log.Info("task accepted", "assign", RedactAssign(a))
	r.emitStatus(&podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_PROVISIONING})

	go func() {
		defer e.wg.Done()
		defer close(r.done)
		defer prepCancel()
		final := r.execute(ctx)
		// The run leaves the table before its terminal event goes out, so the
		// slot is free by the time the coordinator hears the task ended.
		e.mu.Lock()
		delete(e.runs, key)
		e.mu.Unlock()
		if final != nil {
			attrs := []any{"state", final.GetState().String(), "reason", final.GetReason()}
			if final.ExitCode != nil {
				attrs = append(attrs, "exit_code", final.GetExitCode())
			}
			r.log.Info("task finished", attrs...)
			r.emitStatus(final)
		}
	}()
	return r.done, nil
}

// Cancel stops a running task attempt: SIGTERM, then SIGKILL after grace (0
// means the task's cancel_grace_seconds, else DefaultGrace). The run ends with
// the terminal status CANCELLED and reason. A cancel that arrives before the
// container started aborts the preparation (an image pull, say) and still ends
// CANCELLED. attempt 0 matches whichever attempt of the task is running.
// Cancel does not wait for the container to stop; it reports whether a run was
// found.
func (e *Executor) Cancel(taskID string, attempt int32, reason string, grace time.Duration) bool {
	e.mu.Lock()
	var found []*run
	for k, r := range e.runs {
		if k.TaskID == taskID && (attempt == 0 || k.Attempt == attempt) {
			found = append(found, r)
		}
	}
	e.mu.Unlock()
	for _, r := range found {
		r.cancel(reason, grace)
	}
	return len(found) > 0
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

// Wait blocks until every run started so far has finished. After the context
// the runs were started with ends, this is how the agent waits for their
// containers to be stopped and removed before it exits.
func (e *Executor) Wait() { e.wg.Wait() }

// RemoveOrphans removes containers labelled with this node that no run of
// this executor owns: containers an earlier agent process left behind when it
// crashed. Their output since the crash is gone and the coordinator has been
// told (by a Hello that does not list them) that the tasks were lost, so
// letting them run on would only burn the machine and hold ports and memory.
// Call it once before accepting work.
func (e *Executor) RemoveOrphans(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	list, err := e.docker.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelNode+"="+e.nodeID)),
	})
	if err != nil {
		return fmt.Errorf("list this node's containers (is the Docker engine running?): %w", err)
	}
	var errs []error
	for _, c := range list {
		key := Key{TaskID: c.Labels[LabelTask]}
		if n, err := strconv.Atoi(c.Labels[LabelAttempt]); err == nil {
			key.Attempt = int32(n)
		}
		e.mu.Lock()
		_, owned := e.runs[key]
		e.mu.Unlock()
		if owned {
			continue
		}
		e.log.Warn("removing a container an earlier agent process left behind",
			"container", shortID(c.ID), "task_id", key.TaskID, "attempt", key.Attempt, "state", c.State)
		if err := e.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("remove orphaned container %s: %w", shortID(c.ID), err))
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

// RedactAssign is the only way an assignment is logged. An assignment carries
// the task's environment and command line, which routinely hold secrets, so
// only what identifies the task and the names (never the values) of its
// environment make it into a log.
func RedactAssign(a *podiumv1.Assign) slog.Value {
	spec := a.GetSpec()
	envKeys := make([]string, 0, len(spec.GetEnv()))
	for k := range spec.GetEnv() {
		envKeys = append(envKeys, k)
	}
	sort.Strings(envKeys)
	return slog.GroupValue(
		slog.String("task_id", a.GetTaskId()),
		slog.Int("attempt", int(a.GetAttempt())),
		slog.String("image", spec.GetImage()),
		slog.Int("argc", len(spec.GetCommand())),
		slog.Any("env_keys", envKeys),
		slog.Int64("timeout_seconds", spec.GetTimeoutSeconds()),
	)
}

// graceFor picks the grace period: an explicit one, else the task's own,
// else the executor's default.
func (e *Executor) graceFor(spec *podiumv1.TaskSpec, explicit time.Duration) time.Duration {
	if explicit > 0 {
		return explicit
	}
	if s := spec.GetCancelGraceSeconds(); s > 0 {
		return time.Duration(s) * time.Second
	}
	return e.defaultGrace
}

// graceSeconds converts a grace period into the whole seconds the engine
// takes, rounding up so a grace of 1.5 s never becomes an instant SIGKILL.
func graceSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}

func now() *timestamppb.Timestamp { return timestamppb.Now() }

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
