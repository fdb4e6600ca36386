package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/session"
	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fleet is N simulated nodes, each the agent's own session (agent/session)
// with a scripted Runner in place of Docker. The failover figure is about how
// nodes find the surviving replica, so the code that decides it — which
// replica to dial next (the HelloAck's list), the backoff and its jitter, the
// outbox that re-sends unacknowledged events from the stored high-water mark —
// is the agent's, not a copy of it. Each session builds its own HTTP client,
// so each node is its own TCP connection, as on a real fleet.
//
// benchkit.Fleet is not used: it dials the one URL it is given, so its nodes
// cannot move to another replica (see the report's note on it).
type fleet struct {
	nodes   []*node
	log     *slog.Logger
	logEach time.Duration // how often a running task writes a line

	// finish ends every task: each writes its last line and SUCCEEDED.
	finish     chan struct{}
	finishOnce sync.Once

	mu     sync.Mutex
	tasks  map[string]*taskRun // by task id, across nodes
	starts atomic.Int64        // Runner.Start calls (first per attempt)
}

// node is one simulated machine: its session and when it was connected to
// which replica.
type node struct {
	id   string
	sess *session.Session

	mu sync.Mutex
	// replica is the replica id the node's current stream is on ("" while
	// it has none); since is when that stream had its HelloAck.
	replica string
	since   time.Time
	drops   int // streams that ended
}

// taskRun is one attempt a node runs: the output it wrote, kept to compare
// with what the coordinator stored.
type taskRun struct {
	key     attempt.Key
	node    string
	started time.Time
	mu      sync.Mutex
	out     bytes.Buffer
	done    chan struct{}
}

func newFleet(log *slog.Logger, url string, creds []benchkit.NodeCred, logEach time.Duration, nodeLog io.Writer) (*fleet, error) {
	f := &fleet{log: log, logEach: logEach, finish: make(chan struct{}), tasks: map[string]*taskRun{}}
	// Sessions log reconnects at WARN; with thousands of nodes that is a
	// file to read afterwards, not the terminal.
	nlog := slog.New(slog.NewTextHandler(nodeLog, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, c := range creds {
		n := &node{id: c.ID}
		sess, err := session.New(session.Config{
			CoordinatorURL: url, NodeID: c.ID, NodeKey: c.Key, Hostname: c.ID, AgentVersion: "bench",
			MaxTasks: 4, Runner: &runner{f: f, node: c.ID}, Logger: nlog.With("node", c.ID),
			Capacity: func(context.Context) *podiumv1.Capacity {
				return &podiumv1.Capacity{CpuCores: 8, MemoryMb: 16 << 10, DiskFreeMb: 100 << 10}
			},
			OnState: n.onState,
		})
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", c.ID, err)
		}
		n.sess = sess
		f.nodes = append(f.nodes, n)
	}
	return f, nil
}

func (n *node) onState(st session.State) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if st.Connected {
		n.replica, n.since = st.Replica, time.Now()
		return
	}
	if n.replica != "" {
		n.drops++
	}
	n.replica = ""
}

// on returns the replica the node is connected to and since when.
func (n *node) on() (string, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica, n.since
}

// run starts the sessions in waves of batch (0: all at once), each wave once
// the nodes before it are connected, so that a fleet larger than a replica can
// take in one burst still gets onto A; the returned channel closes once every
// started session has returned after ctx ended.
func (f *fleet) run(ctx context.Context, batch int) <-chan struct{} {
	if batch <= 0 {
		batch = len(f.nodes)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, n := range f.nodes {
			if i > 0 && i%batch == 0 && !waitFor(ctx, time.Hour, func() bool { c, _, _ := f.connectedTo(replicaA); return c >= i }) {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _ = n.sess.Run(ctx) }()
		}
	}()
	go func() { wg.Wait(); close(done) }()
	return done
}

// connectedTo counts the nodes whose stream is on replica, and the earliest
// and latest time one of them had its HelloAck there.
func (f *fleet) connectedTo(replica string) (n int, first, last time.Time) {
	for _, nd := range f.nodes {
		r, at := nd.on()
		if r != replica {
			continue
		}
		n++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return n, first, last
}

// sinceTimes are, for the nodes on replica, how long after t0 each had its
// HelloAck there.
func (f *fleet) sinceTimes(replica string, t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, nd := range f.nodes {
		if r, at := nd.on(); r == replica {
			out = append(out, at.Sub(t0))
		}
	}
	return out
}

func (f *fleet) drops() int {
	total := 0
	for _, nd := range f.nodes {
		nd.mu.Lock()
		total += nd.drops
		nd.mu.Unlock()
	}
	return total
}

// endTasks makes every running task write its last line and succeed.
func (f *fleet) endTasks() { f.finishOnce.Do(func() { close(f.finish) }) }

// task returns the run of a task id, if a node started it.
func (f *fleet) task(id string) (*taskRun, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	return t, ok
}

// runner is a node's scripted stand-in for the Docker executor: an assigned
// task is accepted (PROVISIONING), starts (RUNNING), writes one numbered line
// to stdout every logEach until the benchmark ends the tasks, then exits 0.
// The lines go through the session's Emit as a container's output does, so
// they are spooled, batched, re-sent after a reconnect and acknowledged the
// agent's way.
type runner struct {
	f    *fleet
	node string

	mu   sync.Mutex
	runs map[attempt.Key]*taskRun
}

func (r *runner) Start(ctx context.Context, a *podiumv1.Assign, emit attempt.Emit) (<-chan struct{}, error) {
	k := attempt.Of(a)
	r.mu.Lock()
	if r.runs == nil {
		r.runs = map[attempt.Key]*taskRun{}
	}
	if _, ok := r.runs[k]; ok {
		r.mu.Unlock()
		return nil, attempt.ErrAlreadyRunning
	}
	t := &taskRun{key: k, node: r.node, started: time.Now(), done: make(chan struct{})}
	r.runs[k] = t
	r.mu.Unlock()
	r.f.mu.Lock()
	r.f.tasks[k.TaskID] = t
	r.f.mu.Unlock()
	r.f.starts.Add(1)

	ev := func(body func(*podiumv1.TaskEvent)) {
		e := &podiumv1.TaskEvent{TaskId: k.TaskID, Attempt: k.Attempt, Time: timestamppb.Now()}
		body(e)
		emit(e, nil)
	}
	status := func(s podiumv1.TaskState, exit *int32) {
		ev(func(e *podiumv1.TaskEvent) {
			e.Body = &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s, ExitCode: exit}}
		})
	}
	status(podiumv1.TaskState_TASK_STATE_PROVISIONING, nil)
	go func() {
		defer close(t.done)
		defer func() {
			r.mu.Lock()
			delete(r.runs, k)
			r.mu.Unlock()
		}()
		status(podiumv1.TaskState_TASK_STATE_RUNNING, nil)
		tick := time.NewTicker(r.f.logEach)
		defer tick.Stop()
		for line := 1; ; line++ {
			last := false
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-r.f.finish:
				last = true
			}
			t.mu.Lock()
			off := uint64(t.out.Len())
			data := fmt.Appendf(nil, "%s line %06d at %s\n", k.TaskID, line, time.Now().UTC().Format(time.RFC3339Nano))
			t.out.Write(data)
			t.mu.Unlock()
			ev(func(e *podiumv1.TaskEvent) {
				e.Body = &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Offset: off, Data: data}}
			})
			if last {
				var zero int32
				status(podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero)
				return
			}
		}
	}()
	return t.done, nil
}

// Cancel is not expected: no task is cancelled in this benchmark, and a
// coordinator that cancels one (reconciliation that lost track of it) shows up
// as a task that did not succeed.
func (r *runner) Cancel(taskID string, n int32, reason string, _ time.Duration) bool {
	r.f.log.Warn("a node was told to cancel a task", "node", r.node, "task", taskID, "attempt", n, "reason", reason)
	return false
}

func (r *runner) Inject(string, int32, int64, string) (bool, error) {
	return false, attempt.ErrNotRunning
}

func (r *runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func (r *runner) Adopted(string, int32, []*podiumv1.SecretValue) {}

// Lease does nothing: a simulated task has no runner to fence it.
func (r *runner) Lease(string, int32, time.Time, time.Duration) {}

// output is what the task wrote, for comparison with what was stored.
func (t *taskRun) output() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.out.Bytes())
}
