// Package dispatch decides which queued task runs next and runs the passes
// that place them. Its Dispatcher is a leader worker (coordinator/leader):
// only the replica holding the leader lock runs it, so placement decisions
// never race each other, and a standby's dispatcher starts when that replica
// takes over. It decides when a pass runs and keeps the leader's copy of the
// fleet; which node a task goes to is package placement's rule, and the store
// claims and records.
//
// The order a pass offers queued tasks in is this package's policy, stated
// in Go by Order (fair share) and OrderFIFO (--fair-share=false). The store
// executes it in SQL (store.DispatchPass), in the statement that locks the
// tasks FOR UPDATE SKIP LOCKED: a LIMIT with SKIP LOCKED takes whichever rows
// the statement reaches first, so sorting after the claim would sort the
// wrong tasks. A test holds the two to the same order
// (TestClaimOrderIsDispatchOrder).
package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
)

// Config tunes the dispatcher. Zero values take the defaults.
type Config struct {
	// Tick is how often a pass runs again while the last one left tasks
	// waiting for room (500 ms): finishing tasks free room without a
	// doorbell of their own that says a waiting task now fits.
	Tick time.Duration
	// SafetyPass is how often a pass runs when nothing says one is needed
	// (5 s). The leader otherwise reads the queue only when a doorbell rang,
	// when its last pass filled its batch or left tasks waiting, and at the
	// start of a term; a doorbell that was lost (NOTIFY only says "look";
	// the tables are the truth) costs at most this much latency, never a task.
	SafetyPass time.Duration
	// Batch is how many queued tasks one pass claims (256).
	Batch int
	// AckDeadline is how long a node has to accept an assignment (15 s).
	AckDeadline time.Duration
	// TimeoutMargin is how long past its timeout a task may run before the
	// control plane stops it; the node normally gets there first (10 s).
	TimeoutMargin time.Duration
	// UnreachableAfter is how long a node may be silent and still be offered
	// tasks (30 s): the watchdog's unreachable threshold, applied at
	// placement so that no task goes to a node the watchdog has not judged
	// yet (store.Candidates).
	UnreachableAfter time.Duration
	// WriteOffAfter is how long a cancelled task whose node is gone waits for
	// the node before it is written off (60 s).
	WriteOffAfter time.Duration
	// SweepInterval is how often those deadlines are checked (1 s).
	SweepInterval time.Duration
	// FleetMaxAge is how long the leader uses the connected nodes it read
	// before reading them again when nothing says they changed (1 s).
	FleetMaxAge time.Duration
	// FleetRecheck is how soon it reads them again when tasks are waiting for
	// room, which finishing tasks free without a fleet doorbell (100 ms).
	FleetRecheck time.Duration
	// NoFairShare turns fair share off (--fair-share=false): passes claim by
	// priority, then age (store.DispatchPassFIFO), as before fair share, to
	// measure what it costs or to step back from it. Only the leader's
	// dispatcher claims, so the leader's setting is the one that applies.
	NoFairShare bool
}

// Deps are what the dispatcher works with.
type Deps struct {
	Store *store.Store
	// Bus brings the submit and fleet doorbells (store.ChannelSubmit).
	Bus *bus.Bus
	// Metrics records dispatch latency; nil records nothing.
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// Dispatcher runs dispatch passes and enforces the lifecycle's deadlines.
type Dispatcher struct {
	cfg     Config
	store   *store.Store
	bus     *bus.Bus
	log     *slog.Logger
	metrics *metrics.Metrics

	// fleet is the leader's copy of the connected nodes and what they are
	// committed to, and of the absent ones as they last reported themselves
	// (store.Fleet), charged with each placement it makes.
	// Reading it aggregates every active task, too much to do for every
	// pass; it is read again when a fleet doorbell says nodes came, went or
	// changed, when tasks wait for room, and at least every FleetMaxAge.
	// Between reads it can only overstate what nodes are committed to (a
	// finished task still counts), so it never over-commits a node. Only Run
	// touches it.
	fleet       []*placement.Candidate
	fleetAt     time.Time
	fleetStale  bool
	lastWaiting int
	// lastFull is when a pass last looked at the tasks already found
	// unschedulable.
	lastFull time.Time
}

// New returns a dispatcher; give it to the leader (coordinator/leader) to run.
func New(cfg Config, deps Deps) *Dispatcher {
	if cfg.Tick == 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.SafetyPass == 0 {
		cfg.SafetyPass = 5 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.AckDeadline == 0 {
		cfg.AckDeadline = 15 * time.Second
	}
	if cfg.TimeoutMargin == 0 {
		cfg.TimeoutMargin = 10 * time.Second
	}
	if cfg.WriteOffAfter == 0 {
		cfg.WriteOffAfter = 60 * time.Second
	}
	if cfg.UnreachableAfter == 0 {
		cfg.UnreachableAfter = 30 * time.Second
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.FleetMaxAge == 0 {
		cfg.FleetMaxAge = time.Second
	}
	if cfg.FleetRecheck == 0 {
		cfg.FleetRecheck = 100 * time.Millisecond
	}
	return &Dispatcher{cfg: cfg, store: deps.Store, bus: deps.Bus, metrics: deps.Metrics, log: deps.Log}
}

// Run places tasks and enforces deadlines until ctx ends. The leader calls it
// for each term it leads and cancels ctx when the term ends; every term starts
// from a fresh read of the fleet and of the queue, since another replica's
// dispatcher may have placed tasks in between.
//
// A pass runs only when something says the queue may hold work it can place:
// a submit doorbell (a submit, a requeue, a task given back, a slot freed, a
// fleet change: every one rings ChannelSubmit), the start of a term, a failed
// pass, tasks left waiting by the last pass (every Tick), or the slow
// SafetyPass. An idle leader does not read the tasks table on every tick:
// asking "is anything queued?" twice a second cost more Postgres time per
// task than the event insert.
func (s *Dispatcher) Run(ctx context.Context) error {
	bell, unsubscribe := s.bus.Subscribe(store.ChannelSubmit, "")
	defer unsubscribe()
	fleetBell, unsubscribeFleet := s.bus.Subscribe(store.ChannelSubmit, store.PayloadFleet)
	defer unsubscribeFleet()
	s.fleet, s.fleetStale = nil, true
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	safety := time.NewTicker(s.cfg.SafetyPass)
	defer safety.Stop()
	sweep := time.NewTicker(s.cfg.SweepInterval)
	defer sweep.Stop()
	due := true
	for {
		// A fleet doorbell rings both bells, in the order the changes were
		// committed; whichever woke the loop, a drain committed before a
		// submit must be seen by the pass that places it.
		select {
		case <-fleetBell:
			s.fleetStale = true
		default:
		}
		if due {
			due = false
			if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("scheduler: pass failed; retrying", "err", err)
				due = true // at the next wake-up, the tick at the latest
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-fleetBell:
			s.fleetStale, due = true, true
		case <-bell:
			due = true
		case <-t.C:
			due = due || s.lastWaiting > 0
		case <-safety.C:
			due = true
		case <-sweep.C:
			s.Sweep(ctx) // what it requeues rings the bell
		}
	}
}

// Sweep enforces the lifecycle's deadlines: assignments not accepted in time
// are taken back, tasks past their timeout are stopped, cancelled tasks
// whose node is gone are written off, queued tasks past their queue timeout
// fail (store.ExpireQueued), and tasks whose retry backoff has passed are
// handed to the next pass.
func (s *Dispatcher) Sweep(ctx context.Context) {
	s.storedThresholds(ctx)
	steps := []struct {
		name string
		run  func() ([]store.Touched, error)
	}{
		{"ack deadline", func() ([]store.Touched, error) { return s.store.ExpireAssignments(ctx, s.cfg.AckDeadline) }},
		{"timeout", func() ([]store.Touched, error) { return s.store.TimeOutTasks(ctx, s.cfg.TimeoutMargin) }},
		{"write-off", func() ([]store.Touched, error) { return s.store.WriteOffCancelled(ctx, s.cfg.WriteOffAfter) }},
		{"queue timeout", func() ([]store.Touched, error) { return s.store.ExpireQueued(ctx) }},
	}
	for _, step := range steps {
		touched, err := step.run()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("scheduler: sweep failed", "step", step.name, "err", err)
			}
			continue
		}
		for _, t := range touched {
			s.log.Info("task deadline enforced", "step", step.name, "task", t.TaskID, "node", t.NodeID)
			_ = s.store.Notify(ctx, store.ChannelTaskEvents, t.TaskID)
			if t.NodeID != "" {
				_ = s.store.Notify(ctx, store.ChannelNodeCommands, t.NodeID)
			}
		}
		if len(touched) > 0 {
			_ = s.store.Notify(ctx, store.ChannelSubmit, "")
		}
	}
	// A retry's backoff ending rings nothing by itself: the task waits in
	// its row (not_before), and this is what wakes the pass that places it.
	ended, err := s.store.EndBackoffs(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("scheduler: sweep failed", "step", "retry backoff", "err", err)
	case ended > 0:
		s.log.Info("retry backoffs ended", "tasks", ended)
		_ = s.store.Notify(ctx, store.ChannelSubmit, "")
	}
}

// unschedulableRecheck is how often a pass looks again at the tasks already
// found unschedulable (besides after a fleet doorbell).
const unschedulableRecheck = 10 * time.Second

// Pass runs dispatch passes until the queue has nothing more to place; each
// rings the nodes it gave work (store.DispatchPass).
func (s *Dispatcher) Pass(ctx context.Context) error {
	for {
		// A fleet doorbell (a node came, went or changed) may have made
		// unschedulable tasks runnable.
		fleetChanged := s.fleetStale
		if err := s.readFleet(ctx); err != nil {
			return err
		}
		var placed []store.Placement
		var waiting int
		var err error
		// Tasks already found unschedulable are looked at again by a pass
		// every unschedulableRecheck, and after a fleet doorbell; the
		// passes between leave them out, so they never hold up the tasks
		// behind them in their sharer's queue.
		full := fleetChanged || time.Since(s.lastFull) >= unschedulableRecheck
		if full {
			s.lastFull = time.Now()
		}
		placed, waiting, err = s.store.DispatchPassWith(ctx, s.cfg.Batch, PlaceOn(s.fleet, time.Now()),
			store.PassOptions{FIFO: s.cfg.NoFairShare, SkipUnschedulable: !full})
		if errors.Is(err, store.ErrNotRung) {
			s.log.Warn("scheduler: ring the nodes (they will find their commands on their next poll)", "err", err)
		} else if err != nil {
			s.fleetStale = true // PlaceOn may have charged it for placements that were not made
			return err
		}
		s.lastWaiting = waiting
		for _, p := range placed {
			if p.Attempt == 1 && !p.Reoffered { // submit → first assignment, once
				s.metrics.Dispatched(time.Since(p.CreatedAt))
			}
		}
		if len(placed) < s.cfg.Batch {
			return nil
		}
	}
}

// readFleet reads the connected nodes again when the copy is stale: a fleet
// doorbell rang, it is older than FleetMaxAge, or the last pass left tasks
// waiting and it is older than FleetRecheck (finished tasks free room
// without telling the fleet doorbell).
func (s *Dispatcher) readFleet(ctx context.Context) error {
	age := time.Since(s.fleetAt)
	if !s.fleetStale && age < s.cfg.FleetMaxAge && (s.lastWaiting == 0 || age < s.cfg.FleetRecheck) {
		return nil
	}
	at := time.Now()
	nodes, err := s.store.Fleet(ctx, s.cfg.UnreachableAfter)
	if err != nil {
		return err
	}
	s.fleet, s.fleetAt, s.fleetStale = Fleet(nodes), at, false
	return nil
}

// storedThresholds takes the deadlines stored for every replica
// (podium.settings): a replica started since with other flags changes them
// for the leader at its next sweep, not at its next term.
func (s *Dispatcher) storedThresholds(ctx context.Context) {
	st, err := s.store.Thresholds(ctx)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			s.log.Warn("scheduler: cannot read the stored thresholds; keeping the last ones", "err", err)
		}
		return
	}
	if st.AckDeadline != s.cfg.AckDeadline || st.WriteOffAfter != s.cfg.WriteOffAfter || st.UnreachableAfter != s.cfg.UnreachableAfter {
		s.log.Info("scheduler: deadlines changed", "ack_deadline", st.AckDeadline, "write_off_after", st.WriteOffAfter,
			"unreachable_after", st.UnreachableAfter, "set_by", st.SetBy)
		s.cfg.AckDeadline, s.cfg.WriteOffAfter, s.cfg.UnreachableAfter = st.AckDeadline, st.WriteOffAfter, st.UnreachableAfter
	}
}
