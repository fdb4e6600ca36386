// Package session is the agent's connection to its coordinator: the
// NodeService.Stream loop that says Hello, heartbeats, takes assignments and
// cancels, and delivers task events until the coordinator acknowledges them.
//
// Streams come and go — a coordinator restarts, a replica hands a node over,
// the network blips — and tasks must not notice. So the session keeps every
// event until it is acknowledged, outside any one stream (the outbox), and
// tasks run on the agent's context, never a stream's.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/spool"
	"github.com/podiumhq/podium/agent/transport"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
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
	// DefaultMaxPendingBytes is how much unacknowledged output the node
	// holds before tasks' output blocks.
	DefaultMaxPendingBytes = 64 << 20
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

// Runner is what the session needs from the executor.
type Runner interface {
	Start(ctx context.Context, a *podiumv1.Assign, emit executor.Emit) (<-chan struct{}, error)
	Cancel(taskID string, attempt int32, reason string, grace time.Duration) bool
	// Inject delivers a message to a running task's inbox; false means a
	// repeat that was dropped.
	Inject(taskID string, attempt int32, messageID int64, text string) (bool, error)
	Running() int
}

// Recovered is a task attempt a previous agent process left in the spool
// that may still be running: the agent resumes it with the executor, or, if
// nothing is left of it, calls Drop.
type Recovered struct {
	Assign *podiumv1.Assign
	// Cursor is the executor's newest stored cursor.
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
	// first, then the replicas HelloAck listed.
	CoordinatorURL string
	NodeID         string
	NodeKey        string
	Hostname       string
	AgentVersion   string
	// MaxTasks is how many tasks the node runs at once unless the
	// coordinator overrides it. Must be at least 1.
	MaxTasks int
	// MinFreeDiskMB drops free slots to 0 while the data disk has less free
	// space than this; 0 disables the check.
	MinFreeDiskMB int64
	// Runner runs the tasks.
	Runner Runner
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
	// kick asks the writer to check whether the node is drained: a run
	// ended, or acknowledgements arrived.
	kick chan struct{}

	mu          sync.Mutex
	draining    bool
	override    int32
	labels      []string
	interval    time.Duration
	replicas    []string
	lastCap     *podiumv1.Capacity
	settingsC   chan struct{} // the writer re-reads settings and heartbeats now
	candidateIx int
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
	}
	var attempts []*spool.Attempt
	if cfg.SpoolDir != "" {
		s.spool, attempts, err = spool.Open(cfg.SpoolDir, log)
		if err != nil {
			return nil, fmt.Errorf("%w (check the agent's data directory)", err)
		}
	}
	s.out = newOutbox(cfg.MaxPendingBytes, s.spool, log)
	s.out.load(attempts)
	for _, a := range attempts {
		if !a.Final && a.Assign != nil {
			s.recovered = append(s.recovered, Recovered{Assign: a.Assign, Cursor: a.Cursor})
		}
		log.Info("found a task attempt in the spool", "task_id", a.TaskID, "attempt", a.Attempt,
			"last_seq", a.LastSeq, "acked_seq", a.Acked, "ended", a.Ended)
	}
	if cfg.HTTPClient != nil {
		s.clients[base.Scheme] = cfg.HTTPClient
	}
	return s, nil
}

// Recovered lists the attempts the spool held that may still be running.
func (s *Session) Recovered() []Recovered { return s.recovered }

// Drop forgets a recovered attempt nothing is left of. The next Hello does
// not report it, so the coordinator treats it as lost with the node's
// previous life and applies its node-loss policy.
func (s *Session) Drop(taskID string, attempt int32) {
	s.out.drop(executor.Key{TaskID: taskID, Attempt: attempt})
}

// ContinueAfter readies the session for notes about an attempt whose final
// status an earlier agent process sent and the coordinator stored: the
// uploads of its artifacts that the executor took over (ResumeUploads).
// Their seqs continue after lastSeq, the attempt's newest event, and, like
// any note after the final status, they are kept in memory only. An attempt
// the spool still holds keeps its own seqs.
func (s *Session) ContinueAfter(k executor.Key, lastSeq uint64) {
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
// executor.Emit the session hands to every run, and is safe for concurrent
// use.
func (s *Session) Emit(ev *podiumv1.TaskEvent, cur *executor.Cursor) {
	var b []byte
	if cur != nil {
		b = cur.Marshal()
	}
	s.out.add(ev, b)
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
		case acked:
			s.log.Warn("stream to coordinator ended soon after it started; reconnecting", "coordinator", target, "err", err)
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

// candidate is the coordinator address to dial next: the enrolled URL first,
// then each replica the last HelloAck listed, in turn.
func (s *Session) candidate() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.candidatesLocked()
	return all[s.candidateIx%len(all)]
}

func (s *Session) nextCandidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.candidateIx = (s.candidateIx + 1) % len(s.candidatesLocked())
}

func (s *Session) candidatesLocked() []string {
	all := []string{s.base.String()}
	for _, r := range s.replicas {
		if r != "" && !slices.Contains(all, r) {
			all = append(all, r)
		}
	}
	return all
}

// replicaURL turns an address from HelloAck into a URL. A bare host:port
// takes the scheme of the enrolled URL, because a replica serves the same way
// its peers do.
func (s *Session) replicaURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = s.base.Scheme + "://" + addr
	}
	u, err := transport.NormalizeURL(addr)
	if err != nil {
		s.log.Warn("ignoring a replica address the coordinator sent", "address", addr, "err", err)
		return ""
	}
	return u
}

func (s *Session) httpClient(target string) (connect.HTTPClient, error) {
	u, err := transport.ParseURL(target)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[u.Scheme]; ok {
		return c, nil
	}
	c, err := transport.NewClient(target)
	if err != nil {
		return nil, err
	}
	s.clients[u.Scheme] = c
	return c, nil
}

// Coordinator returns the HTTP client and URL of the coordinator the session
// is connected to, or tries next: what other calls on the node's behalf (an
// artifact upload) use, so they dial the way the stream does. Requests made
// with it must use the agent's context (see transport.ContextWithDialer).
func (s *Session) Coordinator() (connect.HTTPClient, string, error) {
	target := s.candidate()
	hc, err := s.httpClient(target)
	if err != nil {
		return nil, "", err
	}
	return hc, target, nil
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

// runStream is one stream from dial to end. acked reports whether the
// coordinator answered the Hello.
func (s *Session) runStream(ctx context.Context, target string) (acked bool, err error) {
	hc, err := s.httpClient(target)
	if err != nil {
		return false, err
	}
	client := podiumv1connect.NewNodeServiceClient(hc, target)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream := client.Stream(sctx)
	// Cancelling the stream's context alone does not end it: once the
	// response headers have arrived, net/http's HTTP/2 transport no longer
	// watches the request context, and a Receive blocks until the body is
	// closed. Closing both halves when the context ends is what lets a
	// timeout, a failed send or shutdown actually stop the receiver.
	stopClose := context.AfterFunc(sctx, func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	defer func() {
		if stopClose() {
			_ = stream.CloseRequest()
			_ = stream.CloseResponse()
		}
	}()

	s.log.Debug("dialling coordinator", "coordinator", target)
	hello := &podiumv1.Hello{
		NodeId:       s.cfg.NodeID,
		NodeKey:      s.cfg.NodeKey,
		AgentVersion: s.cfg.AgentVersion,
		Hostname:     s.cfg.Hostname,
		Capacity:     s.capacity(ctx),
		Running:      s.out.running(),
	}
	if err := s.send(stream, cancel, &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		return false, s.streamErr(sctx, stream, err)
	}

	t := time.AfterFunc(helloAckTimeout, func() {
		cancel(fmt.Errorf("no HelloAck within %s", helloAckTimeout))
	})
	msg, err := stream.Receive()
	t.Stop()
	if err != nil {
		return false, s.streamErr(sctx, stream, err)
	}
	ack := msg.GetHelloAck()
	if ack == nil {
		return false, fmt.Errorf("the coordinator answered Hello with %T instead of HelloAck; check that it runs a compatible version", msg.GetMsg())
	}
	s.out.resetSent()
	s.applyHelloAck(ack, hello.GetRunning())
	s.log.Info("connected to coordinator", "coordinator", target, "replica", ack.GetReplica(),
		"adopted", len(ack.GetAdopt()), "draining", ack.GetDraining())
	s.notifyState(State{Connected: true, Coordinator: target, Replica: ack.GetReplica()})

	// The receiver ends the stream when it fails, and the writer ends it
	// when it fails; either way both stop, and runStream waits for the
	// receiver so no goroutine outlives the stream that started it.
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		cancel(s.receive(stream))
	}()
	cancel(s.write(sctx, stream, cancel))
	<-recvDone
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	return true, context.Cause(sctx)
}

// streamErr picks the most useful error for a stream that ended: the
// coordinator's own error if it sent one, else why the stream was cancelled.
func (s *Session) streamErr(sctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], err error) error {
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if connect.CodeOf(err) == connect.CodeUnknown {
		// Send reports a closed stream as io.EOF; Receive has the real error.
		if _, rerr := stream.Receive(); rerr != nil {
			return rerr
		}
	}
	return err
}

// send sends one message, ending the stream if the coordinator stops taking
// them (see sendTimeout).
func (s *Session) send(stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc, req *podiumv1.StreamRequest) error {
	t := time.AfterFunc(sendTimeout, func() {
		cancel(fmt.Errorf("the coordinator took no message for %s", sendTimeout))
	})
	defer t.Stop()
	return stream.Send(req)
}

// write is the stream's only sender: heartbeats and event batches. It
// returns why the stream should end: a failed send, or ctx ending.
func (s *Session) write(ctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc) error {
	sendHeartbeat := func() error {
		err := s.send(stream, cancel, &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: s.heartbeat(ctx)}})
		if err != nil {
			return fmt.Errorf("send heartbeat: %w", err)
		}
		return nil
	}
	// A heartbeat right after HelloAck gives the coordinator free slots that
	// already account for the drain flag and slot override it just sent, so
	// the settings signal from that HelloAck is already served.
	select {
	case <-s.settingsC:
	default:
	}
	if err := sendHeartbeat(); err != nil {
		return err
	}
	if s.drained() {
		return ErrDrained
	}
	hb := time.NewTicker(s.heartbeatInterval())
	defer hb.Stop()
	stall := time.NewTicker(ackStallAfter / 3)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-hb.C:
			if err := sendHeartbeat(); err != nil {
				return err
			}
			if s.drained() {
				return ErrDrained
			}
		case <-s.settingsC:
			hb.Reset(s.heartbeatInterval())
			if err := sendHeartbeat(); err != nil {
				return err
			}
			if s.drained() {
				return ErrDrained
			}
		case <-s.kick:
			if s.drained() {
				return ErrDrained
			}
		case <-stall.C:
			if s.out.rewindStalled(ackStallAfter) {
				s.log.Warn("the coordinator has not acknowledged events for a while; sending them again", "after", ackStallAfter)
			}
		case <-s.out.notify:
			if err := s.flush(ctx, stream, cancel); err != nil {
				return err
			}
		}
	}
}

// flush sends everything the outbox has not sent on this stream, in batches.
// Unless a full batch or a status change is already waiting it first lingers
// briefly, so a burst of output becomes one batch rather than one message each.
func (s *Session) flush(ctx context.Context, stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], cancel context.CancelCauseFunc) error {
	if bytes, events := s.out.unsent(); bytes < flushBytes && events < flushEvents && !s.out.urgent() {
		t := time.NewTimer(flushLinger)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	for {
		batch := s.out.nextBatch(flushBytes, flushEvents)
		if len(batch) == 0 {
			return nil
		}
		req := &podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{Events: &podiumv1.EventBatch{Events: batch}}}
		if err := s.send(stream, cancel, req); err != nil {
			return fmt.Errorf("send events: %w", err)
		}
	}
}

// receive handles what the coordinator sends until the stream ends, and
// returns why it ended.
func (s *Session) receive(stream *connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the coordinator closed the stream")
			}
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *podiumv1.StreamResponse_Assign:
			s.handleAssign(m.Assign)
		case *podiumv1.StreamResponse_Cancel:
			s.handleCancel(m.Cancel)
		case *podiumv1.StreamResponse_Ack:
			s.out.ack(executor.Key{TaskID: m.Ack.GetTaskId(), Attempt: m.Ack.GetAttempt()}, m.Ack.GetAckedSeq())
			s.poke()
		case *podiumv1.StreamResponse_HelloAck:
			// A HelloAck on a stream that is already up is treated as the
			// live half of a drain, slot or label change; its adopt list was
			// settled when the stream opened.
			s.applySettings(m.HelloAck)
		case *podiumv1.StreamResponse_Config:
			c := m.Config
			s.applyConfig(c.GetDraining(), c.GetMaxTasksOverride(), c.GetLabels())
		case *podiumv1.StreamResponse_Inject:
			s.handleInject(m.Inject)
		default:
			s.log.Warn("ignoring a message this agent does not know; is the coordinator newer?", "type", fmt.Sprintf("%T", m))
		}
	}
}

// applyHelloAck settles which attempts this node keeps, then takes the
// coordinator's settings. reported is what the Hello listed.
func (s *Session) applyHelloAck(ack *podiumv1.HelloAck, reported []*podiumv1.RunningTask) {
	answered := make(map[executor.Key]bool)
	for _, a := range ack.GetAdopt() {
		key := executor.Key{TaskID: a.GetTaskId(), Attempt: a.GetAttempt()}
		answered[key] = true
		if a.GetKeep() {
			if !s.out.adopt(key, a.GetAckedSeq()) {
				s.log.Debug("the coordinator adopted a task this node no longer tracks", "task_id", key.TaskID, "attempt", key.Attempt)
			}
			continue
		}
		s.log.Warn("cancelling a task the coordinator no longer holds on this node",
			"task_id", key.TaskID, "attempt", key.Attempt, "reason", CancelReasonNotHeld)
		live := s.cfg.Runner.Cancel(key.TaskID, key.Attempt, CancelReasonNotHeld, 0)
		s.out.forget(key, live)
	}
	for _, r := range reported {
		key := executor.Key{TaskID: r.GetTaskId(), Attempt: r.GetAttempt()}
		if !answered[key] {
			// Keep it and re-send what was not acknowledged: dropping output
			// because an answer was missing would be the worse mistake.
			s.log.Debug("the coordinator did not answer for a reported task; keeping it", "task_id", key.TaskID, "attempt", key.Attempt)
		}
	}
	s.applySettings(ack)
}

// applySettings takes the node-wide settings of a HelloAck.
func (s *Session) applySettings(ack *podiumv1.HelloAck) {
	s.applyConfig(ack.GetDraining(), ack.GetMaxTasksOverride(), ack.GetLabels())
	s.mu.Lock()
	if ms := ack.GetHeartbeatIntervalMs(); ms > 0 {
		s.interval = time.Duration(ms) * time.Millisecond
	}
	s.replicas = s.replicas[:0]
	for _, r := range ack.GetReplicas() {
		if u := s.replicaURL(r); u != "" {
			s.replicas = append(s.replicas, u)
		}
	}
	s.mu.Unlock()
	select {
	case s.settingsC <- struct{}{}:
	default:
	}
}

func (s *Session) heartbeatInterval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interval
}

// applyConfig takes the coordinator's drain flag, slot override and labels,
// from a HelloAck or a live NodeConfig, and makes the writer heartbeat at once
// so the scheduler sees the new free slots without waiting for the next tick.
func (s *Session) applyConfig(draining bool, override int32, labels []string) {
	s.mu.Lock()
	if s.draining != draining || s.override != override || !slices.Equal(s.labels, labels) {
		s.log.Info("coordinator changed this node's settings", "draining", draining,
			"max_tasks_override", override, "labels", labels)
	}
	s.draining = draining
	s.override = override
	s.labels = append(s.labels[:0], labels...)
	s.mu.Unlock()
	select {
	case s.settingsC <- struct{}{}:
	default:
	}
}

// drained is ExitOnDrain's condition: draining, nothing running, nothing
// unacknowledged.
func (s *Session) drained() bool {
	if !s.cfg.ExitOnDrain {
		return false
	}
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	return draining && s.cfg.Runner.Running() == 0 && s.out.empty()
}

// Stats is what the session reports for monitoring.
type Stats struct {
	FreeSlots int32
	// EventsSpooled are events kept (on disk) until the coordinator acks them;
	// UnackedBytes is the task output among them.
	EventsSpooled int
	UnackedBytes  int
}

// Stats returns the session's figures now.
func (s *Session) Stats() Stats {
	events, bytes := s.out.stats()
	return Stats{FreeSlots: s.freeSlots(), EventsSpooled: events, UnackedBytes: bytes}
}

// maxTasks is the node's budget: the coordinator's override when it set one.
func (s *Session) maxTasks() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.override > 0 {
		return s.override
	}
	return int32(s.cfg.MaxTasks)
}

// freeSlots is how many more tasks the node takes. The node enforces its own
// budget, so this is both what it advertises and what it checks assignments
// against: 0 while draining or while the data disk is nearly full.
func (s *Session) freeSlots() int32 {
	s.mu.Lock()
	draining := s.draining
	diskLow := s.cfg.MinFreeDiskMB > 0 && s.lastCap != nil &&
		s.lastCap.GetDiskFreeMb() > 0 && s.lastCap.GetDiskFreeMb() < s.cfg.MinFreeDiskMB
	s.mu.Unlock()
	if draining || diskLow {
		return 0
	}
	return max(0, s.maxTasks()-int32(s.cfg.Runner.Running()))
}

func (s *Session) capacity(ctx context.Context) *podiumv1.Capacity {
	c := s.cfg.Capacity(ctx)
	if c == nil {
		c = &podiumv1.Capacity{}
	}
	c.MaxTasks = s.maxTasks()
	s.mu.Lock()
	s.lastCap = c
	s.mu.Unlock()
	return c
}

func (s *Session) heartbeat(ctx context.Context) *podiumv1.Heartbeat {
	c := s.capacity(ctx)
	return &podiumv1.Heartbeat{
		Capacity:     c,
		RunningTasks: int32(s.cfg.Runner.Running()),
		FreeSlots:    s.freeSlots(),
	}
}

// handleAssign starts an assigned task, or sends it back when the node has no
// room. A repeated assignment of an attempt the node already has is ignored:
// running a task twice is worse than anything a lost message can cause.
func (s *Session) handleAssign(a *podiumv1.Assign) {
	key := executor.Key{TaskID: a.GetTaskId(), Attempt: a.GetAttempt()}
	log := s.log.With("assign", executor.RedactAssign(a))
	if s.out.ended(key) {
		log.Warn("ignoring a repeated assignment of a task attempt that already ran on this node")
		return
	}
	if s.out.active(key) {
		// Checked before the slots: a full node must not answer a repeat
		// with a rejection, which would requeue a task that is running.
		log.Warn("ignoring a repeated assignment of a running task attempt")
		return
	}
	if s.freeSlots() < 1 {
		s.mu.Lock()
		draining := s.draining
		s.mu.Unlock()
		log.Info("rejecting assignment: no free slot", "draining", draining, "running", s.cfg.Runner.Running(), "max_tasks", s.maxTasks())
		s.Emit(&podiumv1.TaskEvent{
			TaskId:  key.TaskID,
			Attempt: key.Attempt,
			Time:    timestamppb.Now(),
			Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
				State:  podiumv1.TaskState_TASK_STATE_QUEUED,
				Reason: RejectReasonNoSlot,
			}},
		}, nil)
		return
	}
	if !s.out.begin(a) {
		log.Warn("ignoring a repeated assignment of a running task attempt")
		return
	}
	done, err := s.cfg.Runner.Start(s.taskCtx, a, s.Emit)
	if err != nil {
		if errors.Is(err, executor.ErrAlreadyRunning) {
			log.Warn("ignoring a repeated assignment of a running task attempt")
			return
		}
		log.Error("could not start assigned task", "err", err)
		return
	}
	s.Track(done)
}

// handleInject puts a person's message into a running task's inbox. A
// message for a task that is not here is dropped with a log line: the
// coordinator only sends messages for tasks it holds on this node, so the
// task has just ended.
func (s *Session) handleInject(in *podiumv1.Inject) {
	ok, err := s.cfg.Runner.Inject(in.GetTaskId(), in.GetAttempt(), in.GetMessageId(), in.GetText())
	switch {
	case errors.Is(err, executor.ErrNotRunning):
		s.log.Info("message for a task that is not running here; dropped", "task_id", in.GetTaskId(),
			"attempt", in.GetAttempt(), "message_id", in.GetMessageId())
	case err != nil:
		s.log.Error("could not deliver a message to a task's inbox", "task_id", in.GetTaskId(),
			"message_id", in.GetMessageId(), "err", err)
	case !ok:
		s.log.Debug("dropped a repeated message", "task_id", in.GetTaskId(), "message_id", in.GetMessageId())
	}
}

func (s *Session) handleCancel(c *podiumv1.Cancel) {
	grace := time.Duration(c.GetGraceSeconds()) * time.Second
	if s.cfg.Runner.Cancel(c.GetTaskId(), c.GetAttempt(), c.GetReason(), grace) {
		s.log.Info("cancelling task", "task_id", c.GetTaskId(), "attempt", c.GetAttempt(), "reason", c.GetReason(), "grace", grace)
		return
	}
	// Nothing runs: the task already ended (its terminal status is on its
	// way) or never reached this node. Either way there is nothing to stop.
	s.log.Info("cancel for a task that is not running here; nothing to do", "task_id", c.GetTaskId(), "attempt", c.GetAttempt())
}
