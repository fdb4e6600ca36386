package nodes

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/ingest"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
)

// CancelReasonNotOurs is what a node is told when it reports a task the control
// plane no longer holds on it. It is explicit so that an operator reading the
// node's log knows why a container they can see was torn down.
const CancelReasonNotOurs = "reconciliation: the control plane no longer holds this task on this node"

// cleanupTimeout bounds each step of winding down that touches Postgres (a
// session's row, its lock, the last heartbeats): a replica that cannot reach
// Postgres must still end its streams, so that its nodes reconnect to a
// replica that can.
const cleanupTimeout = 3 * time.Second

// loopTimeout bounds each statement of the service's background loops
// (heartbeat flushes, the replica list, takeover requests, the fleet
// doorbell): one that Postgres does not answer fails and is retried on the
// loop's next turn, instead of stalling the loop until the connection is
// found dead.
const loopTimeout = 10 * time.Second

var (
	// ErrSessionClosed is returned when a message is sent to a session that ended.
	ErrSessionClosed = errors.New("nodes: session closed")
)

// Config tunes the node service. Zero values take the protocol's defaults.
type Config struct {
	// Replica is this coordinator replica's id, recorded on the node's row.
	Replica string
	// HelloTimeout is how long a new stream may take to say Hello (5 s).
	HelloTimeout time.Duration
	// HeartbeatInterval is what nodes are told to heartbeat at (10 s).
	HeartbeatInterval time.Duration
	// FlushInterval is how often buffered heartbeats are written (1 s).
	FlushInterval time.Duration
	// TakeoverWait is how long a new stream waits for another replica to let go
	// of the node (10 s).
	TakeoverWait time.Duration
	// CommandPoll is how often a session looks for commands without a doorbell
	// (30 s). The doorbell and the bus's re-read after a reconnect make this a
	// last resort; polling often costs one query per node per poll.
	CommandPoll time.Duration
	// MaxNodes is the most nodes this replica holds at once; one more is
	// refused (ResourceExhausted, naming the setting to raise) and its agent
	// tries another replica. Every node held is an advisory lock in
	// Postgres's lock table, which every query on the server shares: filling
	// it fails them all with "out of shared memory". 0 means half that table
	// (server.New reads it at start; see store.LockTableSize); below 0, no bound.
	MaxNodes int
}

func (c *Config) defaults() {
	if c.HelloTimeout == 0 {
		c.HelloTimeout = 5 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.TakeoverWait == 0 {
		c.TakeoverWait = 10 * time.Second
	}
	if c.CommandPoll == 0 {
		c.CommandPoll = 30 * time.Second
	}
}

// Service implements podium.v1.NodeService's Stream and UploadArtifact;
// coordinator/server joins it to coordinator/enroll's Enroll in one handler.
type Service struct {
	cfg    Config
	store  *store.Store
	bus    *bus.Bus
	leases *lease.Keeper
	log    *slog.Logger
	reg    *Registry
	// secrets resolves task secrets for assignments and adoptions.
	secrets *secrets.Vault

	hbMu  sync.Mutex
	beats map[string]store.Heartbeat

	metrics   *metrics.Metrics
	ingester  *ingest.Ingester
	deliverer *deliverer
	// fleetBell says a session started or ended since the fleet doorbell
	// last rang (capacity 1); see fleetLoop.
	fleetBell chan struct{}

	// artifacts is nil on a coordinator with no object store.
	artifacts *artifacts.Service

	// held counts the node locks this replica holds or is taking, against
	// cfg.MaxNodes.
	held atomic.Int64
}

// Deps are what the node service works with.
type Deps struct {
	Store *store.Store
	// Bus brings the command, takeover and submit doorbells.
	Bus *bus.Bus
	// Leases holds the lock on every node whose stream this replica serves.
	Leases *lease.Keeper
	// Registry is where the sessions are kept; nil starts an empty one. The
	// server makes it first because the metrics count its sessions and the
	// service records into the metrics.
	Registry *Registry
	// Metrics records heartbeat figures; nil records nothing.
	Metrics *metrics.Metrics
	// Ingester stores the events the sessions receive (required). It is
	// the server's to run: sessions can store no events unless it runs.
	Ingester *ingest.Ingester
	// Artifacts stores uploads; nil refuses them as not configured, and the
	// node service still serves everything else.
	Artifacts *artifacts.Service
	// Secrets opens the values of the secrets a task names, for its
	// assignment and its adoption; nil is a vault without a key.
	Secrets *secrets.Vault
	Log     *slog.Logger
}

// NewService returns the node service. Sessions can store nothing until Run.
func NewService(cfg Config, deps Deps) *Service {
	cfg.defaults()
	reg := deps.Registry
	if reg == nil {
		reg = NewRegistry()
	}
	vault := deps.Secrets
	if vault == nil {
		vault = secrets.NewVault(nil, deps.Store)
	}
	return &Service{cfg: cfg, store: deps.Store, bus: deps.Bus, leases: deps.Leases, log: deps.Log, reg: reg,
		metrics: deps.Metrics, artifacts: deps.Artifacts, secrets: vault,
		beats: map[string]store.Heartbeat{}, ingester: deps.Ingester, deliverer: newDeliverer(deps.Store, vault, deps.Log),
		fleetBell: make(chan struct{}, 1)}
}

// Registry is this replica's live sessions.
func (s *Service) Registry() *Registry { return s.reg }

// Run does the service's background work until ctx ends, then returns nil:
// delivering the sessions' commands, flushing heartbeats, answering other
// replicas' takeover requests and ending every session when the lease
// connection breaks. Sessions receive no commands unless it runs (and store
// no events unless the Ingester runs).
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.fleetLoop(ctx) })
	wg.Go(func() { s.deliverer.run(ctx) })
	wg.Go(func() { s.flushLoop(ctx) })
	wg.Go(func() { s.takeoverLoop(ctx) })
	wg.Go(func() { s.leaseLoop(ctx) })
	wg.Go(func() { s.replicasLoop(ctx) })
	wg.Wait()
	return nil
}

// leaseLoop ends every session at once when the lease connection breaks. With
// the connection went the lock on every node this replica served: it can no
// longer prove it holds any of them, and another replica may already have
// taken them. Ending the streams makes the nodes reconnect, to this replica on
// its new lease or to another, instead of staying with a session nothing
// vouches for.
func (s *Service) leaseLoop(ctx context.Context) {
	for {
		l, err := s.leases.Current(ctx)
		if err != nil {
			return // ctx ended
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Lost():
			s.reg.CloseAll()
		}
	}
}

// takeoverLoop ends a session here when a stream for the same node has landed
// on another replica: the newest stream wins, wherever it is.
func (s *Service) takeoverLoop(ctx context.Context) {
	ch, cancel := s.bus.Subscribe(store.ChannelTakeover, "")
	defer cancel()
	// Whatever the doorbell says, the stored rows decide: a session here whose
	// epoch is no longer the node's, or that a newer stream asked for, is stale.
	// The tick catches a doorbell missed while the listener reconnected.
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-time.After(2 * time.Second):
		}
		s.closeStaleSessions(ctx)
	}
}

func (s *Service) closeStaleSessions(ctx context.Context) {
	s.reg.mu.Lock()
	all := make([]*Session, 0, len(s.reg.sessions))
	for _, sess := range s.reg.sessions {
		all = append(all, sess)
	}
	s.reg.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ids, epochs := make([]string, len(all)), make([]int64, len(all))
	for i, sess := range all {
		ids[i], epochs[i] = sess.NodeID, sess.Epoch
	}
	qctx, cancel := context.WithTimeout(ctx, loopTimeout)
	wanted, err := s.store.TakeoverRequests(qctx, ids, epochs)
	cancel()
	if err != nil {
		s.log.Warn("nodes: read takeover requests", "err", err)
		return
	}
	for _, sess := range all {
		if wanted[sess.NodeID] {
			s.log.Info("node's stream moved to another replica; ending the session here", "node", sess.NodeID)
			sess.Close()
		}
	}
}

// fleetChanged tells the scheduler, soon, that a node connected or went.
func (s *Service) fleetChanged() {
	select {
	case s.fleetBell <- struct{}{}:
	default:
	}
}

// replicasWindow is how recently a replica must have touched its row to be
// listed to nodes; each touches it every 10 s (flushLoop).
const replicasWindow = time.Minute

// replicasLoop pushes the list of replicas to every node this replica holds
// when a replica joins or leaves: at once on the ChannelReplicas doorbell
// (RegisterReplica, RetireReplica), and, for a replica that died without
// retiring, when its row ages out, which the touch tick notices. It pushes
// only a list that differs from the last one it read; a session that started
// while the list changed reads it again once registered (Stream).
func (s *Service) replicasLoop(ctx context.Context) {
	bell, unsubscribe := s.bus.Subscribe(store.ChannelReplicas, "")
	defer unsubscribe()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	read := func() ([]string, error) {
		qctx, cancel := context.WithTimeout(ctx, loopTimeout)
		defer cancel()
		return s.store.ReplicaAddresses(qctx, replicasWindow)
	}
	last, _ := read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-bell:
		case <-tick.C:
		}
		addrs, err := read()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("nodes: list replicas (nodes keep the list they have)", "err", err)
			}
			continue
		}
		if len(addrs) == 0 || slices.Equal(addrs, last) {
			continue
		}
		last = addrs
		s.reg.pushReplicas(addrs)
	}
}

// fleetInterval is the most often a replica rings the fleet doorbell for its
// sessions: a restart of the control plane reconnects every node at once, and
// one notifying commit per node would queue them all behind Postgres's notify
// lock for nothing — the scheduler reads the whole fleet on one ring.
const fleetInterval = 100 * time.Millisecond

// fleetLoop rings the fleet doorbell after sessions started or ended, at most
// once per fleetInterval.
func (s *Service) fleetLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.fleetBell:
		}
		nctx, cancel := context.WithTimeout(ctx, loopTimeout)
		err := s.store.Notify(nctx, store.ChannelSubmit, store.PayloadFleet)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("nodes: ring the fleet doorbell (the scheduler reads the fleet every second anyway)", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(fleetInterval):
		}
	}
}

func (s *Service) flushLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.FlushInterval)
	defer t.Stop()
	touch := time.NewTicker(10 * time.Second)
	defer touch.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			s.flush(fctx)
			cancel()
			return
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, loopTimeout)
			s.flush(fctx)
			cancel()
		case <-touch.C:
			tctx, cancel := context.WithTimeout(ctx, loopTimeout)
			err := s.store.TouchReplica(tctx, s.cfg.Replica)
			cancel()
			if err != nil {
				s.log.Warn("nodes: touch replica row", "err", err)
			}
		}
	}
}

func (s *Service) flush(ctx context.Context) {
	s.hbMu.Lock()
	if len(s.beats) == 0 {
		s.hbMu.Unlock()
		return
	}
	batch := make([]store.Heartbeat, 0, len(s.beats))
	for _, b := range s.beats {
		batch = append(batch, b)
	}
	s.beats = map[string]store.Heartbeat{}
	s.hbMu.Unlock()
	start := time.Now()
	written, err := s.store.FlushHeartbeats(ctx, batch)
	if err == nil {
		s.metrics.Flushed(time.Since(start), written)
		// The scheduler's copy of the fleet has a node's old GPUs: ring
		// once they are written, so its next read sees the new ones.
		for _, b := range batch {
			if b.GPUsChanged {
				s.fleetChanged()
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("nodes: heartbeat flush failed; they will be written with the next one", "err", err, "nodes", len(batch))
		s.hbMu.Lock()
		for _, b := range batch {
			if newer, ok := s.beats[b.NodeID]; ok {
				s.beats[b.NodeID] = mergeBeat(b, newer)
			} else {
				s.beats[b.NodeID] = b
			}
		}
		s.hbMu.Unlock()
	}
}

func (s *Service) recordHeartbeat(b store.Heartbeat) {
	s.hbMu.Lock()
	if older, ok := s.beats[b.NodeID]; ok {
		b = mergeBeat(older, b)
	}
	s.beats[b.NodeID] = b
	s.hbMu.Unlock()
}
