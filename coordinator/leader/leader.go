// Package leader decides which coordinator replica runs the jobs that must have
// one author at a time, and runs them there.
//
// Every replica serves the API and node streams, but some work goes wrong when
// two replicas do it at once: two schedulers would race each other for the same
// free slots, and two watchdogs would sweep the same nodes against different
// clocks, each counting the reconnect grace period from its own start. That
// work is written as Workers. An Elector competes for the
// leader advisory lock and runs its workers while it holds the lock; the moment
// it stops holding it, their context ends. The server gives it:
//
//   - the dispatcher (coordinator/dispatch): which queued task goes first, and
//     through package placement, which node it goes to;
//   - the watchdog (coordinator/watchdog):
//     who decides, from the stored heartbeats, that a node is unreachable or
//     offline, and sends its tasks through the node-loss policy;
//
// and later leader-only jobs (retention, for one) join them the same way.
//
// The lock is held on the replica's lease connection (coordinator/lease), the
// one that holds its node leases too. When that connection breaks, the replica
// can no longer prove it holds anything, so it stops leading at the same moment
// it ends its sessions; Postgres has already released the lock, and a standby
// takes it on its next try. A lock has no fencing token: until the old leader
// notices (within the lease's ping interval) two replicas may both act as
// leader, which the store's transition rules (explicit allowed-from states,
// skip-locked claims) make harmless.
//
// Leadership ends in one of three ways:
//   - lost: the lease connection broke. Workers are cancelled; there is no lock
//     left to release.
//   - stepped down: a worker returned while this replica leads. A leader that has
//     silently stopped one of its jobs would hold the lock that keeps every
//     other replica from running it, so the other workers are stopped and the
//     lock released for someone else.
//   - handed over: the Elector's context ended (the replica is shutting down).
//     Workers are stopped first, then the lock is released at once, so a
//     standby takes over now instead of after its next Retry, and never while
//     the old leader's workers still run.
//
// Whichever way it ended, the replica rings the standbys (Channel) and then
// sits out one Retry before competing again, so that a standby wins rather than
// the replica that just let go.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/coordinator/store"
)

// Channel is the doorbell a replica rings when it lets go of leadership: a
// standby that hears it tries for the lock at once instead of at its next
// Retry. The bus of every replica must listen on it. A standby whose bus was
// not listening yet misses the ring but loses nothing: the bus rings every
// subscriber once it starts listening, and the standby tries then.
const Channel = "podium_leader"

// Worker is a job only the leader runs. Run works until ctx ends and then
// returns promptly: the lock is released only after every worker has returned,
// so a worker that ignores its context keeps a standby from taking over.
// Returning while ctx is still live makes the replica step down.
type Worker interface {
	Run(ctx context.Context) error
}

// WorkerFunc makes a function a Worker.
type WorkerFunc func(ctx context.Context) error

// Run calls f.
func (f WorkerFunc) Run(ctx context.Context) error { return f(ctx) }

// Config tunes the election. Zero values take the defaults.
type Config struct {
	// Retry is how often a standby tries for the lock (1 s). A hand-over rings
	// the standbys, so Retry bounds only how long the fleet goes without a
	// leader after one died without a word — and how long a replica that just
	// stopped leading waits before it competes again.
	Retry time.Duration
}

// Deps are what an Elector works with.
type Deps struct {
	// Leases holds the leader lock on its current lease connection; its Run
	// must be going for the Elector to ever lead.
	Leases *lease.Keeper
	// Bus brings the hand-over doorbell; it must listen on Channel.
	Bus *bus.Bus
	// Store rings the doorbell.
	Store *store.Store
	Log   *slog.Logger
}

// Elector competes for leadership and runs the workers while it leads.
type Elector struct {
	cfg     Config
	deps    Deps
	workers []Worker
	leading atomic.Bool
}

// New returns an Elector that runs workers while it leads. Nothing happens until
// Run.
func New(cfg Config, deps Deps, workers ...Worker) *Elector {
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Elector{cfg: cfg, deps: deps, workers: workers}
}

// Leading reports whether this replica leads: it holds the leader lock and its
// workers run (or are stopping). It turns false only after they have returned.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Run competes for leadership until ctx ends, running the workers while it
// leads. When ctx ends while it leads, it hands over: the workers stop, the
// lock is released and the standbys are rung. It returns nil once ctx has
// ended; there is no failure it does not retry.
func (e *Elector) Run(ctx context.Context) error {
	bell, unsubscribe := e.deps.Bus.Subscribe(Channel, "")
	defer unsubscribe()
	for {
		l, err := e.deps.Leases.Current(ctx)
		if err != nil {
			return nil // ctx ended
		}
		ok, err := l.TryLock(ctx, lease.LeaderKey)
		if err != nil && ctx.Err() == nil && !errors.Is(err, lease.ErrLost) {
			e.deps.Log.Warn("leader: cannot try for the leader lock; retrying", "err", err, "in", e.cfg.Retry)
		}
		if err == nil && !ok {
			e.deps.Log.Debug("another replica leads; standing by")
		}
		if err == nil && ok {
			e.lead(ctx, l)
			if ctx.Err() != nil {
				return nil
			}
			// Sit out one Retry, deaf to the doorbell this replica just rang,
			// so that a standby takes the lock.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(e.cfg.Retry):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-bell:
		case <-time.After(e.cfg.Retry):
		}
	}
}

// lead runs the workers until leadership ends, then lets go of it.
func (e *Elector) lead(ctx context.Context, l *lease.Lease) {
	log := e.deps.Log
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lostWatch := make(chan struct{})
	go func() {
		defer close(lostWatch)
		select {
		case <-l.Lost():
			cancel()
		case <-lctx.Done():
		}
	}()

	e.leading.Store(true)
	log.Info("this replica is now the leader", "workers", len(e.workers))
	g, gctx := errgroup.WithContext(lctx)
	for i, w := range e.workers {
		g.Go(func() error {
			err := w.Run(gctx)
			if gctx.Err() != nil {
				return nil // it stopped because leadership is ending
			}
			if err == nil {
				err = errors.New("it returned")
			}
			return fmt.Errorf("leader: worker %d (%T) stopped while this replica leads: %w", i, w, err)
		})
	}
	failed := g.Wait()
	e.leading.Store(false)
	cancel()
	<-lostWatch

	// The workers have all returned: only now may another replica lead.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer hcancel()
	select {
	case <-l.Lost():
		log.Warn("this replica is no longer the leader: its lease connection is gone")
	default:
		switch {
		case failed != nil:
			log.Error("this replica steps down as leader", "err", failed)
		default:
			log.Info("this replica hands leadership over")
		}
		if err := l.Unlock(hctx, lease.LeaderKey); err != nil {
			log.Warn("leader: cannot release the leader lock; standbys take over when the lease connection closes", "err", err)
		}
	}
	if err := e.deps.Store.Notify(hctx, Channel, ""); err != nil {
		log.Warn("leader: cannot ring the standbys; they take over at their next try", "err", err)
	}
}
