package nodes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/groupcommit"
	"github.com/podiumhq/podium/coordinator/ingest"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Stream is the steady-state node stream. The first message must be a Hello
// with a valid node key within the hello timeout. Then the replica takes the
// node's lease (asking whichever replica holds it to let go), reconciles what
// the node reports against what the tables say, and from there the node
// heartbeats and pushes events while the replica pushes commands and acks.
//
// Opening the session (authentication, the lease, the session row,
// reconciliation) runs on a goroutine of its own, which ends once the session
// is open: it goes through pgx and grows a goroutine's stack to tens of KiB,
// which the runtime gives back only by halves, one per garbage collection,
// and a replica holding idle nodes collects rarely. The handler's goroutine,
// which lives as long as the session, thus stays as small as what it does
// while the session runs.
func (s *Service) Stream(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	type opened struct {
		sess *Session
		l    *lease.Lease
		end  func()
		err  error
	}
	ch := make(chan opened, 1)
	go func() {
		var o opened
		o.sess, o.l, o.end, o.err = s.open(ctx, stream)
		ch <- o
	}()
	o := <-ch
	if o.err != nil {
		return o.err
	}
	defer o.end()
	sess, l := o.sess, o.l

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The receiver cannot be waited for — Receive only returns once the
	// handler has — and touches nothing but the request.
	received := make(chan error, 1)
	go func() { received <- s.receiveLoop(sctx, stream, sess) }()
	err := s.serve(sctx, stream, sess, l, received)
	cancel()
	sess.Close()
	s.log.Info("node disconnected", "node", sess.NodeID, "epoch", sess.Epoch, "err", err)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// open opens a node's session from its stream's Hello: it authenticates the
// node, takes its lease, starts its session row, reconciles, sends the
// HelloAck and registers the session. end undoes all of that, in reverse,
// when the session is over; on an error open has undone it already.
func (s *Service) open(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) (
	_ *Session, _ *lease.Lease, end func(), err error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			undoAll()
		}
	}()
	hello, err := s.receiveHello(ctx, stream)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkHello(hello); err != nil {
		s.log.Warn("node stream refused", "peer", stream.Peer().Addr, "err", err)
		return nil, nil, nil, err
	}
	node, err := s.authenticate(ctx, hello.GetNodeId(), hello.GetNodeKey())
	if err != nil {
		s.log.Warn("node stream refused", "node", hello.GetNodeId(), "peer", stream.Peer().Addr, "err", err)
		return nil, nil, nil, err
	}
	if err := enroll.CheckAgentVersion(hello.GetAgentVersion()); err != nil {
		s.log.Warn("node stream refused", "node", node.ID, "peer", stream.Peer().Addr, "err", err)
		return nil, nil, nil, err
	}
	if err := s.reserveNode(); err != nil {
		s.log.Warn("node stream refused", "node", node.ID, "peer", stream.Peer().Addr, "err", err)
		return nil, nil, nil, err
	}
	undo = append(undo, func() { s.held.Add(-1) })
	l, err := s.takeLease(ctx, node.ID)
	if err != nil {
		return nil, nil, nil, err
	}
	key := lease.NodeKey(node.ID)
	undo = append(undo, func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = l.Unlock(uctx, key)
	})

	capa := hello.GetCapacity()
	limits := nodeLimits(capa.GetLimits())
	limits.AllowPrivilegedSidecars = hello.GetAllowPrivilegedSidecars()
	node, err = s.store.StartSession(ctx, store.SessionStart{
		NodeID: node.ID, Replica: s.cfg.Replica, Hostname: hello.GetHostname(), AgentVersion: hello.GetAgentVersion(),
		CPUCores: capa.GetCpuCores(), MemoryMB: capa.GetMemoryMb(), DiskFreeMB: capa.GetDiskFreeMb(), MaxTasks: capa.GetMaxTasks(),
		Limits: limits, GPUs: nodeGPUs(capa.GetGpus()), Disk: nodeDisk(capa), EngineDownSince: reportedSince(capa.GetEngineDownSince()), Lock: key, Reported: int32(len(hello.GetRunning())) + hello.GetStopping(),
	})
	if err != nil {
		return nil, nil, nil, lockTableFull(fmt.Errorf("start session: %w", err))
	}
	sess := newSession(node.ID, node.SessionEpoch)
	sess.heartbeatAcks = hello.GetHeartbeatAcks()
	sess.configure(node.Labels, node.Draining, node.MaxTasksOverride)
	sess.seen(capa)
	undo = append(undo, func() { close(sess.ended) }, func() {
		// Bounded: the stream closes only once this returns, and a
		// replica that lost Postgres must let its nodes go to another.
		// The row left behind names an epoch the node's next session
		// replaces, wherever it starts.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := s.store.EndSession(ctx, node.ID, sess.Epoch); err != nil {
			s.log.Warn("nodes: end session (the node's next session replaces its row)", "node", node.ID, "err", err)
		}
		s.fleetChanged() // one candidate fewer
	})

	ack, cancels, err := s.reconcile(ctx, node, hello.GetRunning(), hello.GetStopping())
	if err != nil {
		return nil, nil, nil, lockTableFull(fmt.Errorf("reconcile: %w", err))
	}
	replicas, err := s.store.ReplicaAddresses(ctx, replicasWindow)
	if err != nil {
		s.log.Warn("nodes: list replicas", "err", err)
	}
	ack.Replicas = replicas
	if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HelloAck{HelloAck: ack}}); err != nil {
		return nil, nil, nil, err
	}
	for _, c := range cancels {
		if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: c}}); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, a := range ack.Adopt {
		if a.Keep {
			sess.charge(a.TaskId, s.costOf(ctx, a.TaskId))
		} else {
			s.reg.Forget(node.ID, a.TaskId)
			sess.tearingDown(1)
		}
	}
	// Attempts the node fenced are not in its Hello, but their teardown
	// still holds slots until its heartbeats say otherwise.
	sess.tearingDown(hello.GetStopping())
	s.reg.put(sess)
	undo = append(undo, func() { s.reg.remove(sess) }, sess.Close)
	// A replica that joined or left between the HelloAck's list and put is
	// pushed by nobody else: replicasLoop pushes to the sessions registered
	// when it reads the list. Reading it again now closes that gap.
	if now, err := s.store.ReplicaAddresses(ctx, replicasWindow); err == nil && len(now) > 0 && !slices.Equal(now, replicas) {
		_ = sess.trySend(replicasMessage(now))
	}
	s.log.Info("node connected", "node", node.ID, "epoch", sess.Epoch, "hostname", hello.GetHostname(),
		"running", len(hello.GetRunning()))

	return sess, l, undoAll, nil
}

func (s *Service) receiveHello(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) (*podiumv1.Hello, error) {
	type result struct {
		msg *podiumv1.StreamRequest
		err error
	}
	got := make(chan result, 1)
	go func() {
		m, err := stream.Receive()
		got <- result{m, err}
	}()
	t := time.NewTimer(s.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case r := <-got:
		if r.err != nil {
			return nil, r.err
		}
		h := r.msg.GetHello()
		if h == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message on a node stream must be a Hello"))
		}
		if h.GetNodeId() == "" || h.GetNodeKey() == "" {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("hello: node_id and node_key are required"))
		}
		return h, nil
	case <-t.C:
		s.log.Warn("node stream closed: no Hello in time", "peer", stream.Peer().Addr, "timeout", s.cfg.HelloTimeout)
		return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("no Hello within %s", s.cfg.HelloTimeout))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reserveNode counts one more node against Config.MaxNodes, or refuses it
// with what to do. It is checked before the lock is taken, so a replica never
// takes more locks than its bound, however many Hellos arrive at once.
func (s *Service) reserveNode() error {
	if s.held.Add(1) <= int64(s.cfg.MaxNodes) || s.cfg.MaxNodes < 0 {
		return nil
	}
	s.held.Add(-1)
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"this coordinator replica holds %d nodes, its bound (PODIUM_MAX_NODES, by default half of Postgres's lock table, "+
			"max_locks_per_transaction × (max_connections + max_prepared_transactions)): every node is one advisory lock in it; "+
			"raise max_locks_per_transaction on the Postgres server or run another replica (docs/operations.md)", s.cfg.MaxNodes))
}

// lockTableFull is the error of opening a session when Postgres's lock table
// is full: said so, with what to raise, rather than as Postgres's bare "out of
// shared memory". Once the table is full any statement may be the one that
// fails, the node's own lock or the next query, so every step of open passes
// its error through here; other errors are Unavailable.
func lockTableFull(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53200" {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"the lock table of Postgres is full (%s): every node a replica holds is one advisory lock in it; "+
				"raise max_locks_per_transaction on the Postgres server (docs/operations.md)", pgErr.Message))
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// takeLease takes the node's advisory lock on this replica's lease connection.
// A session for the node on this replica is ended first; one on another replica
// is asked, through the table and a doorbell, to end.
func (s *Service) takeLease(ctx context.Context, nodeID string) (*lease.Lease, error) {
	if old, ok := s.reg.Get(nodeID); ok {
		old.Close()
		select {
		case <-old.ended:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	deadline := time.Now().Add(s.cfg.TakeoverWait)
	asked := false
	for {
		l, err := s.leases.Current(ctx)
		if err != nil {
			return nil, err
		}
		ok, err := l.TryLock(ctx, lease.NodeKey(nodeID))
		if err == nil && ok {
			return l, nil
		}
		if err != nil && !errors.Is(err, lease.ErrLost) {
			return nil, lockTableFull(err)
		}
		if !asked {
			if err := s.store.RequestTakeover(ctx, nodeID); err != nil {
				return nil, connect.NewError(connect.CodeUnavailable, err)
			}
			_ = s.store.Notify(ctx, store.ChannelTakeover, nodeID)
			asked = true
		}
		if time.Now().After(deadline) {
			return nil, connect.NewError(connect.CodeUnavailable,
				fmt.Errorf("node %s is still held by another coordinator replica; retry", nodeID))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reconcile compares what the node reports with what the tables say. A task the
// node has and the control plane still holds on it is adopted from the stored
// high-water mark; one the control plane no longer holds there is cancelled with
// a reason; one the control plane holds but the node did not report was either
// never received (still scheduled: delivered again) or went down with the
// node's previous life (node-loss policy); store.ReconcileNode settles those
// in one transaction.
func (s *Service) reconcile(ctx context.Context, node store.Node, running []*podiumv1.RunningTask, stopping int32) (*podiumv1.HelloAck, []*podiumv1.Cancel, error) {
	ack := &podiumv1.HelloAck{
		NodeId: node.ID, Replica: s.cfg.Replica, HeartbeatIntervalMs: s.cfg.HeartbeatInterval.Milliseconds(),
		Labels: node.Labels, Draining: node.Draining, MaxTasksOverride: node.MaxTasksOverride,
	}
	// The thresholds as stored for every replica now, so the node fences
	// itself by the same clock the leader's watchdog uses.
	if th, err := s.store.Thresholds(ctx); err == nil {
		ack.UnreachableAfterMs, ack.OfflineAfterMs = th.UnreachableAfter.Milliseconds(), th.OfflineAfter.Milliseconds()
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	var cancels []*podiumv1.Cancel
	reported := map[string]int32{}
	for _, r := range running {
		reported[r.GetTaskId()] = r.GetAttempt()
		acked, held, err := s.store.AckedSeq(ctx, node.ID, r.GetTaskId(), r.GetAttempt())
		if err != nil {
			return nil, nil, err
		}
		adopt := &podiumv1.Adopt{TaskId: r.GetTaskId(), Attempt: r.GetAttempt(), Keep: held, AckedSeq: acked}
		if held {
			adopt.Secrets = s.adoptSecrets(ctx, node.ID, r.GetTaskId(), r.GetAttempt())
		}
		ack.Adopt = append(ack.Adopt, adopt)
		if !held {
			s.log.Warn("node reports a task the control plane no longer holds there; cancelling it",
				"node", node.ID, "task", r.GetTaskId(), "attempt", r.GetAttempt())
			cancels = append(cancels, &podiumv1.Cancel{TaskId: r.GetTaskId(), Attempt: r.GetAttempt(), Reason: CancelReasonNotOurs})
		}
	}
	lost, err := s.store.ReconcileNode(ctx, node.ID, reported, stopping)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range lost {
		s.log.Warn("task lost with its node's previous run", "node", node.ID, "task", id)
		_ = s.store.Notify(ctx, store.ChannelTaskEvents, id)
	}
	// The node is a candidate again, with what it really runs: the scheduler
	// reads the fleet.
	s.fleetChanged()
	return ack, cancels, nil
}

// commandsBehind is how soon a node whose queue was full when its commands
// were delivered is tried again.
const commandsBehind = 50 * time.Millisecond

// serve runs the session on the stream handler's goroutine until it ends: it
// is the stream's only writer (Connect streams are not safe for concurrent
// sends), and it starts the delivery of the node's stored commands on their
// doorbell and every CommandPoll in case a doorbell was missed. An idle node
// thus costs two goroutines, this one and its receiver: a writer and a command
// loop of its own, parked for hours on every one of tens of thousands of
// sessions, would be two more stacks per node doing nothing. A delivery runs
// on a goroutine of its own while it lasts (it waits for Postgres), so the
// node's acks are not held up behind it; serve waits for it before returning,
// because Connect finishes the response when the handler returns.
func (s *Service) serve(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse],
	sess *Session, l *lease.Lease, received <-chan error) error {
	bell, unsubscribe := s.bus.Subscribe(store.ChannelNodeCommands, sess.NodeID)
	defer unsubscribe()
	dctx, stopDelivery := context.WithCancel(ctx)
	delivered := make(chan error, 1)
	delivering, again := false, false
	deliver := func() {
		delivering = true
		go func() { delivered <- s.deliverer.pending(dctx, sess) }()
	}
	defer func() {
		stopDelivery()
		if !delivering {
			return
		}
		// The session is over; a delivery it cut short is retried by the
		// node's next session.
		if err := <-delivered; err != nil {
			s.log.Debug("nodes: deliver commands as the session ended", "node", sess.NodeID, "err", err)
		}
	}()
	// Commands stored before the session started are delivered at once.
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case err := <-received:
			return err
		case <-sess.done:
			return nil
		case <-l.Lost():
			return connect.NewError(connect.CodeUnavailable, errors.New("this coordinator replica lost its lease on Postgres; reconnect"))
		case <-ctx.Done():
			return ctx.Err()
		case <-sess.out.ready:
			for m, ok := sess.out.pop(); ok; m, ok = sess.out.pop() {
				if err := stream.Send(m); err != nil {
					return err
				}
			}
		case <-bell:
			if delivering {
				again = true
			} else {
				deliver()
			}
		case <-poll.C:
			if delivering {
				again = true
			} else {
				deliver()
			}
		case err := <-delivered:
			delivering = false
			wait := s.cfg.CommandPoll
			switch {
			case err == nil:
			case errors.Is(err, store.ErrStaleEpoch), errors.Is(err, ErrSessionClosed):
				sess.Close()
				return nil
			case errors.Is(err, errBacklogged):
				wait = commandsBehind // the node is behind; try again soon
			case ctx.Err() == nil:
				s.log.Warn("nodes: deliver commands", "node", sess.NodeID, "err", err)
			}
			if again {
				again = false
				wait = 0
			}
			poll.Reset(wait)
		}
	}
}

func (s *Service) receiveLoop(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse], sess *Session) error {
	for {
		m, err := stream.Receive()
		if err != nil {
			return err
		}
		switch body := m.GetMsg().(type) {
		case *podiumv1.StreamRequest_Heartbeat:
			c := body.Heartbeat.GetCapacity()
			// The GPUs are written only when they change (an operator
			// added or removed one and sent the agent SIGHUP), not with
			// every heartbeat.
			gpusChanged := sess.gpusChanged(c)
			sess.seen(c)
			sess.running(body.Heartbeat.GetRunningTasks())
			hb := store.Heartbeat{NodeID: sess.NodeID, Epoch: sess.Epoch, At: time.Now(),
				CPUCores: c.GetCpuCores(), MemoryMB: c.GetMemoryMb(), DiskFreeMB: c.GetDiskFreeMb(), MaxTasks: c.GetMaxTasks(),
				RunningTasks: body.Heartbeat.GetRunningTasks(), Disk: nodeDisk(c),
				EngineDownSince: reportedSince(c.GetEngineDownSince())}
			if gpusChanged {
				hb.GPUsChanged, hb.GPUs = true, nodeGPUs(c.GetGpus())
			}
			sess.beat(hb)
			s.recordHeartbeat(hb)
			// The node's proof that it reaches the control plane: without
			// it, past the offline threshold, it fences itself. A full queue
			// skips one; the next heartbeat gets its answer.
			if sess.heartbeatAcks {
				_ = sess.trySend(heartbeatAck)
			}
		case *podiumv1.StreamRequest_Events:
			if err := checkEvents(body.Events.GetEvents()); err != nil {
				s.log.Warn("node disconnected: it broke the protocol's bounds; nothing of its message was stored",
					"node", sess.NodeID, "epoch", sess.Epoch, "err", err)
				return err
			}
			ingest.CheckEventUsage(s.log, sess.NodeID, sess.machine, body.Events.GetEvents())
			if err := s.ingest(ctx, sess, body.Events.GetEvents()); err != nil {
				return err
			}
			if hb, ok := sess.heard(time.Now(), s.cfg.HeartbeatInterval); ok {
				s.recordHeartbeat(hb)
			}
		case *podiumv1.StreamRequest_Hello:
			return connect.NewError(connect.CodeInvalidArgument, errors.New("hello may only be the first message of a stream"))
		}
	}
}

type attemptKey struct {
	task    string
	attempt int32
}

// ingest stores a message's events through the replica's shared writer
// (coordinator/ingest), acks
// each attempt's high-water mark and tells the node to stop a task it should
// not have. The writer rings the doorbells after its commit.
func (s *Service) ingest(ctx context.Context, sess *Session, events []*podiumv1.TaskEvent) error {
	groups := map[attemptKey][]*podiumv1.TaskEvent{}
	var order []attemptKey
	for _, ev := range events {
		k := attemptKey{ev.GetTaskId(), ev.GetAttempt()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], ev)
	}
	items := make([]store.IngestItem, len(order))
	for i, k := range order {
		items[i] = store.IngestItem{NodeID: sess.NodeID, Epoch: sess.Epoch, TaskID: k.task, Attempt: k.attempt, Events: groups[k]}
	}
	outcomes, err := s.ingester.Ingest(ctx, items)
	if err != nil {
		if errors.Is(err, groupcommit.ErrStopped) {
			return connect.NewError(connect.CodeUnavailable, err)
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("store events: %w", err))
	}
	for i, k := range order {
		res, err := outcomes[i].Result, outcomes[i].Err
		switch {
		case errors.Is(err, store.ErrStaleEpoch):
			return connect.NewError(connect.CodeAborted, errors.New("this session was replaced by a newer stream for the node"))
		case errors.Is(err, store.ErrNotFound):
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("node %s was removed from the control plane; enroll it again", sess.NodeID))
		case errors.Is(err, store.ErrNotHeld):
			// The node keeps producing events for a task it should not have: drop
			// them (ack everything) and tell it to stop the task.
			var top uint64
			for _, ev := range groups[k] {
				top = max(top, ev.GetSeq())
			}
			s.log.Warn("events for a task the node does not hold; telling it to stop", "node", sess.NodeID, "task", k.task, "attempt", k.attempt)
			if err := sess.send(ackMsg(k, top)); err != nil {
				return err
			}
			terminal := slices.ContainsFunc(groups[k], func(ev *podiumv1.TaskEvent) bool {
				return ev.GetStatus() != nil && store.Terminal(store.StateName(ev.GetStatus().GetState()))
			})
			if !terminal {
				if err := sess.send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: &podiumv1.Cancel{
					TaskId: k.task, Attempt: k.attempt, Reason: CancelReasonNotOurs}}}); err != nil {
					return err
				}
			}
			continue
		case err != nil:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("store events: %w", err))
		}
		if res.Lost > 0 {
			s.log.Warn("events of a task were lost with commits the database had acknowledged (a failover to a standby that had not received them?); the node no longer had them, so the task goes on without them and its log says so",
				"node", sess.NodeID, "task", k.task, "attempt", k.attempt, "lost", res.Lost)
		}
		if res.UsageCut != "" {
			s.log.Warn("nodes: a task's usage report was bounded: "+res.UsageCut, "node", sess.NodeID, "task", k.task, "attempt", k.attempt)
		}
		if err := sess.send(ackMsg(k, res.Acked)); err != nil {
			return err
		}
		if res.Terminal != "" || res.Requeued || res.Retried {
			sess.release(k.task)
		}
	}
	return nil
}

// heartbeatAck answers every heartbeat; it carries nothing, so one value
// serves every session.
var heartbeatAck = &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HeartbeatAck{HeartbeatAck: &podiumv1.HeartbeatAck{}}}

func ackMsg(k attemptKey, seq uint64) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Ack{Ack: &podiumv1.Ack{TaskId: k.task, Attempt: k.attempt, AckedSeq: seq}}}
}

// maxPermitEgress bounds how many egress ranges a node's Hello may permit.
// An operator names a handful; the bound keeps one node's message from
// growing every placement the scheduler makes.
const maxPermitEgress = 256

// nodeLimits is what a node's Hello says it allows one task, as the store
// keeps it. Only the first maxPermitEgress ranges that parse as CIDRs are
// kept: a range placement cannot read permits nothing anyway. A negative
// bound is no bound, as zero is.
func nodeLimits(l *podiumv1.TaskLimits) store.NodeLimits {
	out := store.NodeLimits{
		MaxCPU: max(l.GetMaxCpu(), 0), MaxMemoryMB: max(l.GetMaxMemoryMb(), 0), MaxPids: max(l.GetMaxPids(), 0),
		MaxTimeoutSeconds: max(l.GetMaxTimeoutSeconds(), 0), MaxOutputBytes: max(l.GetMaxOutputBytes(), 0),
	}
	for _, r := range l.GetPermitEgress() {
		if len(out.PermitEgress) == maxPermitEgress {
			break
		}
		if p, err := netip.ParsePrefix(r); err == nil {
			out.PermitEgress = append(out.PermitEgress, p.Masked().String())
		}
	}
	return out
}

// costOfSpec is what a task takes out of a node's budget.
func costOfSpec(spec *podiumv1.TaskSpec) TaskCost {
	cpu, mem := placement.Cost(spec)
	return TaskCost{CPU: cpu, MemoryMB: mem}
}

func (s *Service) costOf(ctx context.Context, taskID string) TaskCost {
	t, err := s.store.GetTask(ctx, taskID)
	if err != nil {
		return TaskCost{}
	}
	return costOfSpec(t.Spec)
}

// adoptSecrets resolves again the secrets of an attempt the node keeps, so
// that an agent that restarted goes on redacting them from the task's
// output: the versions the attempt was assigned (pinned), which is what the
// container holds, not the current ones a `secret set` may have changed
// since. They go only to the node holding the attempt. A secret with no
// value to send (deleted, and the attempt pinned none) is left out with a
// warning and the others are still sent: the task already has its value,
// and failing a running task for it would help nobody.
func (s *Service) adoptSecrets(ctx context.Context, nodeID, taskID string, attempt int32) []*podiumv1.SecretValue {
	t, err := s.store.GetTask(ctx, taskID)
	refs := t.Spec.GetSecrets()
	if err != nil || len(refs) == 0 {
		return nil
	}
	vals, err := s.secrets.ResolveAdopted(ctx, taskID, attempt, refs)
	var missing *secrets.MissingError
	if errors.As(err, &missing) {
		s.log.Warn("secrets of an adopted task no longer exist; the node cannot redact them", "node", nodeID, "task", taskID, "secrets", missing.Names)
		refs = slices.DeleteFunc(slices.Clone(refs), func(r *podiumv1.SecretRef) bool { return slices.Contains(missing.Names, r.GetName()) })
		vals, err = s.secrets.ResolveAdopted(ctx, taskID, attempt, refs)
	}
	if err != nil {
		s.log.Warn("secrets of an adopted task cannot be resolved; the node cannot redact them", "node", nodeID, "task", taskID, "error", err)
		return nil
	}
	return vals
}
