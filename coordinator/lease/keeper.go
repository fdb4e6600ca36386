package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
)

// Keeper keeps a replica's lease connection open, opening a new one after the
// old one is lost. Whatever held locks on the old one (node sessions, the
// leader loop) watches that lease's Lost and starts over on the new one.
type Keeper struct {
	url string
	log *slog.Logger

	mu    sync.Mutex
	cur   *Lease
	ready chan struct{} // closed while cur is usable
	// openErr is why the last try to open a lease connection failed, nil
	// once one opened: what Ready says besides ErrNoLease.
	openErr error
}

// NewKeeper returns a keeper; Run opens the connections.
func NewKeeper(url string, log *slog.Logger) *Keeper {
	return &Keeper{url: url, log: log, ready: make(chan struct{})}
}

// Run keeps a lease open until ctx ends, then closes it (releasing every lock)
// and returns nil. Whatever holds locks on it should have let go of them by
// then: the server ends it after every other loop, so that the leader can hand
// over on a live connection.
func (k *Keeper) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		l, err := Open(ctx, k.url, k.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			k.mu.Lock()
			k.openErr = err
			k.mu.Unlock()
			k.log.Warn("lease: cannot open the lease connection; retrying", "err", store.Explain(err), "in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		k.mu.Lock()
		k.cur, k.openErr = l, nil
		close(k.ready)
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			l.Close()
			return nil
		case <-l.Lost():
			l.Close()
			k.mu.Lock()
			k.cur = nil
			k.ready = make(chan struct{})
			k.mu.Unlock()
		}
	}
}

// ErrNoLease is what Ready says while the keeper has no live lease
// connection: the replica can take no node's stream and cannot lead.
var ErrNoLease = errors.New("lease: no lease connection (reconnecting)")

// Ready says whether the keeper holds a live lease connection now: nil if it
// does, ErrNoLease while it is (re)connecting, joined with why the last try
// to open one failed if one did.
func (k *Keeper) Ready() error {
	k.mu.Lock()
	cur, openErr := k.cur, k.openErr
	k.mu.Unlock()
	if cur == nil {
		if openErr != nil {
			return fmt.Errorf("%w: %w", ErrNoLease, openErr)
		}
		return ErrNoLease
	}
	select {
	case <-cur.Lost():
		return ErrNoLease
	default:
		return nil
	}
}

// Current returns the live lease, waiting for one while there is none.
func (k *Keeper) Current(ctx context.Context) (*Lease, error) {
	for {
		k.mu.Lock()
		cur, ready := k.cur, k.ready
		k.mu.Unlock()
		if cur != nil {
			select {
			case <-cur.Lost():
			default:
				return cur, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ready:
		case <-time.After(100 * time.Millisecond):
		}
	}
}
