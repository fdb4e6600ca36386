// Package session is the agent's connection to its coordinator: the
// NodeService.Stream loop that says Hello, heartbeats, takes assignments and
// cancels, and delivers task events until the coordinator acknowledges them.
//
// Streams come and go — a coordinator restarts, a replica hands a node over,
// the network blips — and tasks must not notice. So the session keeps every
// event until it is acknowledged, outside any one stream (the outbox), and
// tasks run on the agent's context, never a stream's.
//
// The session does not run tasks and does not import the executor that does:
// it starts, cancels and messages them through Runner, an interface it
// defines for what it calls, which package agent fills with the Docker
// executor (a test, with a scripted one). The two are siblings that share
// only package attempt: the key, the Emit callback a run reports through,
// the Cursor stored with each event (opaque bytes here), the errors the
// session branches on and the redacted form an assignment is logged in.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	"github.com/podiumhq/podium/agent/transport"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Protocol numbers (docs/protocol.md has them all) and the agent's own bounds.
const (
	// DefaultHeartbeatInterval applies until a HelloAck says otherwise.
	DefaultHeartbeatInterval = 10 * time.Second
	// helloAckTimeout bounds the wait for the answer to Hello. The
	// coordinator answers within milliseconds when it is healthy.
	helloAckTimeout = 15 * time.Second
	// healthyAfter is how long a stream must have lasted (after its
	// HelloAck) for the reconnect backoff to start over. A coordinator that
	// accepts the Hello and then drops the stream at once must still be
	// backed off from, or a fleet would hammer it once a second.
	healthyAfter = 30 * time.Second
	// sendTimeout bounds one Send. A coordinator that stops reading leaves
	// the stream's flow-control window full and Send blocked; ending the
	// stream is the only way forward.
	sendTimeout = time.Minute
	// ackStallAfter is how long sent events may go unacknowledged before
	// they are sent again (see outbox.rewindStalled).
	ackStallAfter = 30 * time.Second
	// Batching: a batch is sent once it holds flushBytes or flushEvents, or
	// flushLinger after the first event of it was queued.
	flushBytes  = 32 << 10
	flushEvents = 256
	flushLinger = 20 * time.Millisecond
	// A message takes whatever is waiting, up to batchBytes or batchEvents.
	// The coordinator stores one node's messages one after another, a commit
	// each, so output waiting behind a commit goes in the next message
	// whole: a task printing faster than 32 KiB per commit would otherwise
	// be stored at 32 KiB per commit (about 10 MB/s on a durable Postgres),
	// while a large message goes in by COPY on one of the coordinator's
	// bulk writers. Both stay well inside the protocol's bounds (4 MiB and
	// 1,000 events a message).
	batchBytes  = 1 << 20
	batchEvents = 512
	// DefaultMaxPendingBytes is how much unacknowledged output the node
	// holds in memory before tasks' output blocks.
	DefaultMaxPendingBytes = 64 << 20
	// DefaultMaxSpoolBytes is how much the spool may hold on disk before
	// tasks' output blocks. The spool holds what memory does, framed, and
	// between compactions up to about four times that (see package spool).
	DefaultMaxSpoolBytes = 256 << 20
	// flushRounds bounds the batches one flush sends before the writer
	// looks at its other work (heartbeats above all): a task whose output
	// refills the outbox as fast as it is sent must not keep the node's
	// heartbeats from going out, or the node is taken for offline.
	flushRounds = 32
)

// RejectReasonNoSlot is the reason of the QUEUED status a node sends back for
// an assignment it cannot take. The coordinator requeues the task.
const RejectReasonNoSlot = "node has no free slot"

// CancelReasonNotHeld is the reason a task is cancelled with when the
// coordinator's HelloAck says it no longer holds it on this node. It is worded
// for the operator who sees a container torn down and reads the agent's log.
const CancelReasonNotHeld = "reconciliation: the control plane no longer holds this task on this node"

// ErrDrained is what Run returns when ExitOnDrain is set, the node is
// draining, its last task has ended and the coordinator has stored every
// event: the agent may exit, which is how a node is upgraded without
// cutting any task short.
var ErrDrained = errors.New("session: the node is drained")

// Runner is what the session needs from whatever runs tasks: in the agent,
// *executor.Executor, handed over by package agent. It is declared here, by
// the side that uses it, so that the session depends on these calls and
// not on Docker.
type Runner interface {
	// Start runs an assigned attempt on ctx and reports through emit; the
	// channel is closed when the run has finished. An attempt already
	// running is attempt.ErrAlreadyRunning, a repeat the session ignores.
	Start(ctx context.Context, a *podiumv1.Assign, emit attempt.Emit) (<-chan struct{}, error)
	// Cancel stops an attempt (0: any attempt of the task) with reason,
	// after grace (0: the task's own); false means nothing of it runs here.
	Cancel(taskID string, attempt int32, reason string, grace time.Duration) bool
	// Inject delivers a message to a running task's inbox; false means a
	// repeat that was dropped, attempt.ErrNotRunning a task not running here.
	// It is called off the receive loop, one call at a time, and waited for
	// at most Config.InjectTimeout (see deliveries).
	Inject(taskID string, attempt int32, messageID int64, text string) (bool, error)
	// Lease moves the moment at which an attempt's runner stops it on
	// its own, with the grace the command then gets: the fence of a node
	// whose agent cannot act (fence.go).
	Lease(taskID string, attempt int32, fenceAt time.Time, grace time.Duration)
	// Running is how many attempts hold a slot.
	Running() int
	// Adopted hands an attempt the coordinator keeps on this node after a
	// restart the values of its secrets (Adopt.secrets), which the node
	// keeps nowhere but in memory; an attempt that had secrets holds its
	// output until then.
	Adopted(taskID string, attempt int32, secrets []*podiumv1.SecretValue)
}

// Recovered is a task attempt a previous agent process left in the spool
// that may still be running: the agent resumes it with the executor, or, if
// nothing is left of it, calls Drop.
type Recovered struct {
	Assign *podiumv1.Assign
	// Cursor is the run's newest stored cursor (attempt.ParseCursor reads
	// it).
	Cursor []byte
}

// State is what the session tells its owner about the connection, for
// systemd's STATUS= line and readiness.
type State struct {
	Connected   bool
	Coordinator string // the URL of the current or last attempt
	Replica     string // from HelloAck
	Draining    bool
	Err         error // why the last stream ended, when it did
}

// Config is what a Session needs.
type Config struct {
	// CoordinatorURL is the coordinator the node enrolled with; it is tried
	// first, then Coordinators, then the replicas the coordinator listed.
	CoordinatorURL string
	// Coordinators are more addresses to try after CoordinatorURL
	// (podium-agent run --coordinator).
	Coordinators []string
	// Replicas is the replica list an earlier process kept (see
	// OnReplicas): tried after Coordinators until a coordinator sends a new
	// one.
	Replicas []string
	// OnReplicas, if set, is called with the new list (as URLs) whenever
	// the coordinator's list of replicas changes, to keep it for the next
	// process. It is called on the stream's receiver and must not block for
	// long.
	OnReplicas   func([]string)
	NodeID       string
	NodeKey      string
	Hostname     string
	AgentVersion string
	// MaxTasks is how many tasks the node runs at once unless the
	// coordinator overrides it. Must be at least 1.
	MaxTasks int
	// MinFreeDiskMB drops free slots to 0 while the data disk has less free
	// space than this; 0 disables the check.
	MinFreeDiskMB int64
	// Runner runs the tasks.
	Runner Runner
	// Refuse, if set, says why the node cannot take an assignment now
	// beyond its slots ("" takes it): the agent's disk floor, engine and
	// GPU checks. A refused assignment goes back to the coordinator as one
	// for want of a slot does, and the task is placed again.
	Refuse func(*podiumv1.Assign) string
	// Capacity measures the machine; it is called for Hello and every
	// heartbeat. max_tasks is filled in by the session.
	Capacity func(context.Context) *podiumv1.Capacity
	// Logger receives the session's log; nil means slog.Default().
	Logger *slog.Logger
	// HTTPClient overrides the client built for the coordinator's URL.
	HTTPClient connect.HTTPClient
	// ReconnectMin and ReconnectMax override the reconnect backoff.
	ReconnectMin, ReconnectMax time.Duration
	// MaxPendingBytes overrides DefaultMaxPendingBytes.
	MaxPendingBytes int
	// MaxSpoolBytes overrides DefaultMaxSpoolBytes.
	MaxSpoolBytes int64
	// OnState, if set, is called whenever the connection state changes. It
	// must not block.
	OnState func(State)
	// SpoolDir is where events are kept on disk until acknowledged (see
	// package spool); empty keeps them in memory only, which loses track of
	// every task when the agent restarts.
	SpoolDir string
	// ExitOnDrain makes Run return ErrDrained once the node is draining
	// and idle (see ErrDrained).
	ExitOnDrain bool
	// InjectTimeout overrides DefaultInjectTimeout, the longest one
	// delivery into a task's inbox is waited for.
	InjectTimeout time.Duration
	// AllowPrivilegedSidecars is said in every Hello, so that the
	// scheduler sends this node tasks with privileged sidecars only when
	// it runs them (podium-agent --allow-privileged-sidecars).
	AllowPrivilegedSidecars bool
}

// Session is the node's side of NodeService.Stream.
type Session struct {
	cfg     Config
	log     *slog.Logger
	out     *outbox
	base    *url.URL
	clients map[string]connect.HTTPClient // by scheme

	// taskCtx is the context tasks run on: Run's, not a stream's.
	taskCtx context.Context

	spool     *spool.Spool
	recovered []Recovered
	// inject delivers messages to tasks' inboxes off the receive loop.
	inject *deliveries
	// kick asks the writer to check whether the node is drained: a run
	// ended, or acknowledgements arrived.
	kick chan struct{}

	mu          sync.Mutex
	draining    bool
	override    int32
	labels      []string
	interval    time.Duration
	configured  []string // Config.Coordinators, as URLs
	replicas    []string
	lastCap     *podiumv1.Capacity
	settingsC   chan struct{} // the writer re-reads settings and heartbeats now
	candidateIx int

	// Fencing (fence.go), under its own lock: the receiver, the fence
	// check and every assignment touch it.
	fmu sync.Mutex
	// runs are the attempts this node was given to run, and whether the
	// control plane requeues each when it loses the node.
	runs map[attempt.Key]bool
	// leased is the fence each fenceable attempt's runner was last told.
	leased map[attempt.Key]time.Time
	// lastReached is when a replica last answered; fencedAt is when the
	// current silence was acted on (zero: not yet).
	lastReached, fencedAt time.Time
	// offlineAfter and unreachableAfter are the control plane's thresholds
	// (HelloAck); 0 until a coordinator tells them, and no fencing then.
	offlineAfter, unreachableAfter time.Duration
	// restream asks the writer to end the stream after a fence, so that
	// the next Hello (which leaves the fenced attempts out) settles them.
	restream chan struct{}
}

// New checks cfg and returns a session; Run starts it.
func New(cfg Config) (*Session, error) {
	base, err := transport.ParseURL(cfg.CoordinatorURL)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.NodeID == "" || cfg.NodeKey == "":
		return nil, errors.New("session: no node id or key; enroll the node first")
	case cfg.Runner == nil:
		return nil, errors.New("session: Config.Runner is nil")
	case cfg.MaxTasks < 1:
		return nil, fmt.Errorf("session: max tasks is %d; it must be at least 1", cfg.MaxTasks)
	}
	if cfg.Capacity == nil {
		cfg.Capacity = func(context.Context) *podiumv1.Capacity { return &podiumv1.Capacity{} }
	}
	if cfg.MaxPendingBytes <= 0 {
		cfg.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if cfg.MaxSpoolBytes <= 0 {
		cfg.MaxSpoolBytes = DefaultMaxSpoolBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Session{
		cfg:       cfg,
		log:       log,
		base:      base,
		clients:   make(map[string]connect.HTTPClient),
		interval:  DefaultHeartbeatInterval,
		settingsC: make(chan struct{}, 1),
		kick:      make(chan struct{}, 1),
		taskCtx:   context.Background(),
		runs:      make(map[attempt.Key]bool),
		leased:    make(map[attempt.Key]time.Time),
		restream:  make(chan struct{}, 1),
	}
	var attempts []*spool.Attempt
	if cfg.SpoolDir != "" {
		s.spool, attempts, err = spool.Open(cfg.SpoolDir, spool.Options{MaxBytes: cfg.MaxSpoolBytes, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("%w (check the agent's data directory)", err)
		}
	}
	s.inject = newDeliveries(s, cfg.InjectTimeout)
	s.out = newOutbox(cfg.MaxPendingBytes, cfg.MaxSpoolBytes, s.spool, log)
	s.out.load(attempts)
	for _, a := range attempts {
		if !a.Final && a.Assign != nil {
			s.recovered = append(s.recovered, Recovered{Assign: a.Assign, Cursor: a.Cursor})
			s.track(a.Assign)
		}
		log.Info("found a task attempt in the spool", "task_id", a.TaskID, "attempt", a.Attempt,
			"last_seq", a.LastSeq, "acked_seq", a.Acked, "ended", a.Ended)
	}
	if cfg.HTTPClient != nil {
		s.clients[base.Scheme] = cfg.HTTPClient
	}
	for _, c := range cfg.Coordinators {
		if u := s.replicaURL(c); u != "" {
			s.configured = append(s.configured, u)
		}
	}
	s.replicas = s.replicaURLs(cfg.Replicas)
	return s, nil
}

// Recovered lists the attempts the spool held that may still be running.
func (s *Session) Recovered() []Recovered { return s.recovered }

// Drop forgets a recovered attempt nothing is left of. The next Hello does
// not report it, so the coordinator treats it as lost with the node's
// previous life and applies its node-loss policy.
func (s *Session) Drop(taskID string, n int32) {
	s.out.drop(attempt.Key{TaskID: taskID, Attempt: n})
}

// Stored reports whether the coordinator has stored an attempt's events up
// to seq (the session no longer holding the attempt counts: it lets go only
// of what is stored, or of what the coordinator disowned). The executor asks
// before it removes what a restarted agent would need to send them again.
func (s *Session) Stored(k attempt.Key, seq uint64) bool { return s.out.stored(k, seq) }

// ContinueAfter readies the session for notes about an attempt whose final
// status an earlier agent process sent and the coordinator stored: the
// uploads of its artifacts that the executor took over (ResumeUploads).
// Their seqs continue after lastSeq, the attempt's newest event, and, like
// any note after the final status, they are kept in memory only. An attempt
// the spool still holds keeps its own seqs.
func (s *Session) ContinueAfter(k attempt.Key, lastSeq uint64) {
	s.out.continueAfter(k, lastSeq)
}

// Track tells the session when a run it did not start itself (a resumed
// one) ends, for ExitOnDrain.
func (s *Session) Track(done <-chan struct{}) {
	stop := s.taskCtx.Done()
	go func() {
		select {
		case <-done:
			s.poke()
		case <-stop:
		}
	}()
}

func (s *Session) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Emit spools and queues a task event for the coordinator. It is the
// attempt.Emit the session hands to every run, and is safe for concurrent
// use.
func (s *Session) Emit(ev *podiumv1.TaskEvent, cur *attempt.Cursor) {
	if st := ev.GetStatus(); st != nil && st.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		s.fenceEnded(attempt.Key{TaskID: ev.GetTaskId(), Attempt: ev.GetAttempt()}, strings.HasPrefix(st.GetReason(), attempt.RunnerFenced))
	}
	var b []byte
	if cur != nil {
		b = cur.Marshal()
	}
	if s.out.add(ev, b) {
		// A disowned or fenced attempt's teardown ended: the coordinator
		// counts its slot as busy until this node says otherwise, so say
		// it now.
		select {
		case s.settingsC <- struct{}{}:
		default:
		}
	}
}

// Run keeps a stream to the coordinator open until ctx ends, reconnecting
// with backoff whenever it drops. Tasks are started on ctx, so they survive
// reconnects and end with it. Run returns ctx's error; after it returns,
// events are no longer kept (there is nobody left to send them to), so a
// Session runs once.
func (s *Session) Run(ctx context.Context) error {
	s.taskCtx = ctx
	defer func() {
		if s.spool != nil {
			_ = s.spool.Close()
		}
	}()
	defer s.out.close()
	// Inbox deliveries outlive streams (a message queued just before one
	// drops is still delivered) and end with Run.
	dctx, stopDeliveries := context.WithCancel(ctx)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		s.inject.run(dctx)
	}()
	defer func() {
		stopDeliveries()
		<-delivered
	}()
	// Fencing watches the silence across streams and ends with Run.
	fenced := make(chan struct{})
	go func() {
		defer close(fenced)
		s.runFencing(dctx)
	}()
	defer func() {
		stopDeliveries()
		<-fenced
	}()
	// A stream that ends moves the node on to the next candidate, whether it
	// ended after its HelloAck or never got one. The replica that just
	// dropped the node is the likeliest to be down (killed, restarting, cut
	// off), any replica serves any node, and going back to it first would
	// cost a dead replica's fleet one more backoff step — a second or two per
	// node — before it tries the survivor. With a single coordinator the
	// next candidate is the same one.
	bo := &Backoff{Min: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax}
	for {
		target := s.candidate()
		start := time.Now()
		acked, err := s.runStream(ctx, target)
		if ctx.Err() != nil {
			s.notifyState(State{Coordinator: target})
			return ctx.Err()
		}
		if errors.Is(err, ErrDrained) {
			s.log.Info("the node is drained: no task is running and every event is stored")
			s.notifyState(State{Coordinator: target})
			return ErrDrained
		}
		s.notifyState(State{Coordinator: target, Err: err})
		switch {
		case connect.CodeOf(err) == connect.CodeUnauthenticated || connect.CodeOf(err) == connect.CodePermissionDenied:
			s.log.Error("the coordinator refused this node's credentials; if the node was removed or its key "+
				"rotated, enroll it again with `podium-agent enroll --force --coordinator URL --token T`",
				"coordinator", target, "err", err)
			bo.Exhaust()
		case acked && time.Since(start) >= healthyAfter:
			s.log.Warn("stream to coordinator ended; reconnecting", "coordinator", target, "err", err)
			bo.Reset()
			s.nextCandidate()
		case acked:
			s.log.Warn("stream to coordinator ended soon after it started; reconnecting", "coordinator", target, "err", err)
			s.nextCandidate()
		default:
			s.log.Warn("could not open a stream to the coordinator; retrying", "coordinator", target, "err", err)
			s.nextCandidate()
		}
		delay := bo.Next()
		s.log.Debug("waiting before reconnecting", "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Session) notifyState(st State) {
	if s.cfg.OnState == nil {
		return
	}
	s.mu.Lock()
	st.Draining = s.draining
	s.mu.Unlock()
	s.cfg.OnState(st)
}

// Stats is what the session reports for monitoring.
type Stats struct {
	FreeSlots int32
	// EventsSpooled are events kept (on disk) until the coordinator acks them;
	// UnackedBytes is what they take in memory, as the bound
	// (Config.MaxPendingBytes) counts it; SpoolBytes is the spool's size on
	// disk.
	EventsSpooled int
	UnackedBytes  int
	SpoolBytes    int64
}

// Stats returns the session's figures now.
func (s *Session) Stats() Stats {
	events, bytes := s.out.stats()
	st := Stats{FreeSlots: s.freeSlots(), EventsSpooled: events, UnackedBytes: bytes}
	if s.spool != nil {
		st.SpoolBytes = s.spool.Size()
	}
	return st
}
