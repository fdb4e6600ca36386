package retention

import (
	"context"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/store"
)

// Sweeper removes the objects queued in podium.object_deletions from the
// object store, then their queue rows. It is a leader.Worker.
//
// The order is what makes it safe: a key leaves the queue only after its
// object is gone (or was already missing), so a crash or an outage in between
// leaves the key queued and the next pass removes it again, which is
// harmless. While the object store does not answer it logs once, keeps
// everything queued and tries again every pass; podium.storage shows the
// queue.
type Sweeper struct {
	every   time.Duration
	batch   int
	store   *store.Store
	objects *artifacts.Service
	log     *slog.Logger
}

// NewSweeper returns the sweeper, which runs every cfg.Every and removes
// cfg.Batch objects per request. deps.Objects may be nil or not configured:
// keys then stay queued (none are queued without an object store, unless one
// was configured before), and it says so once.
func NewSweeper(cfg Config, deps Deps) *Sweeper {
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults(slog.New(slog.DiscardHandler))
	return &Sweeper{every: cfg.Every, batch: cfg.Batch, store: deps.Store, objects: deps.Objects, log: log}
}

// Run sweeps at once and then every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context) error {
	var down string // what was last logged as wrong; "" when all is well
	for {
		n, err := s.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if msg := err.Error(); msg != down {
				s.log.Warn("retention: cannot remove queued objects from the object store; they stay queued and are tried again",
					"err", err, "every", s.every)
				down = msg
			}
		default:
			if down != "" {
				s.log.Info("retention: removing queued objects again")
				down = ""
			}
			if n > 0 {
				s.log.Info("retention: removed objects from the object store", "objects", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.every):
		}
	}
}

// Sweep removes queued objects until the queue is empty or the object store
// fails, and says how many it removed.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		keys, err := s.store.QueuedDeletions(ctx, s.batch)
		if err != nil || len(keys) == 0 {
			return total, err
		}
		if s.objects == nil {
			return total, artifacts.ErrNotConfigured
		}
		removed, rerr := s.objects.RemoveObjects(ctx, keys)
		if len(removed) > 0 {
			if err := s.store.DeletionsDone(ctx, removed); err != nil {
				return total, err
			}
			total += len(removed)
		}
		if rerr != nil {
			return total, rerr
		}
		if len(keys) < s.batch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
