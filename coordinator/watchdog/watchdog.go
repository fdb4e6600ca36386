// Package watchdog decides node health: from the heartbeat each node's
// session stores, it marks a node unreachable, then offline, and applies the
// node-loss policy to the tasks of a node gone offline (store.SweepHealth,
// store.LoseTasksOfOfflineNodes). It is a leader worker: coordinator/server
// hands it to coordinator/leader, which runs it on one replica at a time.
package watchdog

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
)

// Config is how node health is decided. Zero values take the defaults; the
// thresholds stored for every replica (podium.settings) replace them at each
// sweep.
type Config struct {
	// Interval is how often health is swept (5 s).
	Interval time.Duration
	// UnreachableAfter is how long without a heartbeat before a node is
	// unreachable (30 s). Its tasks keep running: a node that cannot talk has not
	// necessarily stopped working, and a brief network loss should cost nothing.
	UnreachableAfter time.Duration
	// OfflineAfter is how long without a heartbeat before a node is offline and
	// its tasks go through the node-loss policy (120 s).
	OfflineAfter time.Duration
}

func (w *Config) defaults() {
	if w.Interval == 0 {
		w.Interval = 5 * time.Second
	}
	if w.UnreachableAfter == 0 {
		w.UnreachableAfter = 30 * time.Second
	}
	if w.OfflineAfter == 0 {
		w.OfflineAfter = 120 * time.Second
	}
}

// Watchdog sweeps node health.
type Watchdog struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
}

// Deps are what the watchdog works with.
type Deps struct {
	Store *store.Store
	Log   *slog.Logger
}

// New returns the watchdog; it sweeps nothing until Run.
func New(cfg Config, deps Deps) *Watchdog {
	cfg.defaults()
	return &Watchdog{cfg: cfg, store: deps.Store, log: deps.Log}
}

// Run sweeps node health until ctx ends, then returns nil. This is
// where a node is decided unreachable or offline. It is a leader worker
// (coordinator/leader): one replica at a time runs it, so the node-loss policy
// is applied once, and after a leader change the new leader's grace period
// (counted from the start of its term) gives nodes time to reconnect.
//
// It is driven by the stored heartbeat, not by the sessions: a session ending
// already marks its node unreachable, but a node whose TCP connection is wedged
// open keeps a session it is not using, and only the heartbeat clock notices.
func (d *Watchdog) Run(ctx context.Context) error {
	w := d.cfg
	start := time.Now()
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		d.storedThresholds(ctx, &w)
		changes, err := d.store.SweepHealth(ctx, w.UnreachableAfter, w.OfflineAfter, start)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("watchdog: sweep failed", "err", err)
			}
			continue
		}
		for _, c := range changes {
			d.log.Warn("node health changed", "node", c.NodeID, "from", c.From, "to", c.To)
		}
		if len(changes) > 0 {
			_ = d.store.Notify(ctx, store.ChannelSubmit, store.PayloadFleet)
		}
		lost, err := d.store.LoseTasksOfOfflineNodes(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("watchdog: node-loss policy failed", "err", err)
			}
			continue
		}
		for _, id := range lost {
			_ = d.store.Notify(ctx, store.ChannelTaskEvents, id)
		}
		if len(lost) > 0 {
			_ = d.store.Notify(ctx, store.ChannelSubmit, "")
		}
	}
}

// storedThresholds takes the thresholds stored for every replica
// (podium.settings): a replica started since with other flags changes them
// for the leader at its next sweep, not at its next term.
func (d *Watchdog) storedThresholds(ctx context.Context, w *Config) {
	st, err := d.store.Thresholds(ctx)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			d.log.Warn("watchdog: cannot read the stored thresholds; keeping the last ones", "err", err)
		}
		return
	}
	if st.UnreachableAfter != w.UnreachableAfter || st.OfflineAfter != w.OfflineAfter {
		d.log.Info("watchdog: thresholds changed", "unreachable_after", st.UnreachableAfter, "offline_after", st.OfflineAfter, "set_by", st.SetBy)
		w.UnreachableAfter, w.OfflineAfter = st.UnreachableAfter, st.OfflineAfter
	}
}
