// Package bus is the doorbell between coordinator replicas: Postgres
// LISTEN/NOTIFY, through pgxlisten. A notification only says "look" — the
// tables hold the truth — so when the listening connection drops and comes
// back, every subscriber of a channel is rung once to re-read what it may
// have missed. A lost notification costs latency, never correctness.
package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"github.com/podiumhq/podium/coordinator/backoff"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/store"
)

// Bus fans notifications out to in-process subscribers.
type Bus struct {
	log     *slog.Logger
	metrics *metrics.Metrics
	mu      sync.Mutex
	subs    map[string]map[string]map[*sub]struct{} // channel → key → subscribers
	l       pgxlisten.Listener
	// channels is how many channels a connection listens on; conn is the
	// listener's current connection and listening how many of them it
	// listens on yet (Ready).
	channels  int
	conn      *pgx.Conn
	listening int
	// retry spaces out reconnects while they fail; it is reset once a
	// connection listens on every channel.
	retry backoff.Backoff
}

// Reconnects after a failure wait from retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// ErrNotListening is what Ready says while the listener connection is down
// or has not yet listened on every channel.
var ErrNotListening = errors.New("bus: the listener connection is not listening (reconnecting)")

type sub struct{ ch chan struct{} }

// Config says what the bus listens to.
type Config struct {
	// DatabaseURL is where it listens. It must be a direct connection:
	// behind PgBouncer in transaction mode LISTEN does not work.
	DatabaseURL string
	// Channels are the only ones that can be subscribed to; subscribing to
	// another is a wiring mistake, and panics.
	Channels []string
}

// Deps are what the bus works with.
type Deps struct {
	// Metrics counts the notifications received; nil counts nothing.
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// New makes a bus. Nothing is heard until Run.
func New(cfg Config, deps Deps) *Bus {
	log := deps.Log
	b := &Bus{log: log, metrics: deps.Metrics, subs: map[string]map[string]map[*sub]struct{}{},
		retry: backoff.Backoff{Min: retryMin, Max: retryMax}}
	b.l = pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			b.setConn(nil)
			conn, err := store.ConnectDirect(ctx, cfg.DatabaseURL)
			if err == nil {
				b.setConn(conn)
			}
			return conn, err
		},
		LogError: func(ctx context.Context, err error) {
			// Every error pgxlisten reports but a handler's (which ours never
			// return) ends the connection. The wait before the next try is
			// here, not pgxlisten's fixed delay: it grows while the tries
			// fail, so that a Postgres refusing connections is not asked
			// (and the log not written) every second.
			b.setConn(nil)
			b.mu.Lock()
			wait := b.retry.Next()
			b.mu.Unlock()
			log.Warn("bus: listener lost; doorbells are late until it is back", "err", store.Explain(err), "retry_in", wait.Round(100*time.Millisecond))
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		},
		// Negative: no delay of pgxlisten's own; LogError waits.
		ReconnectDelay: -1,
	}
	b.channels = len(cfg.Channels)
	for _, c := range cfg.Channels {
		b.subs[c] = map[string]map[*sub]struct{}{}
		b.l.Handle(c, handler{b: b})
	}
	return b
}

type handler struct{ b *Bus }

func (h handler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	h.b.metrics.Delivered(n.Channel)
	h.b.ring(n.Channel, n.Payload)
	return nil
}

// HandleBacklog runs on every (re)connect: whatever was notified while the
// connection was down is lost, so every subscriber of the channel re-reads.
func (h handler) HandleBacklog(_ context.Context, channel string, conn *pgx.Conn) error {
	h.b.mu.Lock()
	if h.b.conn == conn {
		h.b.listening++
		if h.b.listening == h.b.channels {
			h.b.retry.Reset()
		}
	}
	h.b.mu.Unlock()
	h.b.ringAll(channel)
	return nil
}

func (b *Bus) setConn(conn *pgx.Conn) {
	b.mu.Lock()
	b.conn, b.listening = conn, 0
	b.mu.Unlock()
}

// Ready says whether the listener connection is up and listening on every
// channel: nil if it is, ErrNotListening while it is (re)connecting. A
// replica that is not listening misses doorbells; it catches up when it
// listens again, but until then it answers late.
func (b *Bus) Ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil || b.listening < b.channels {
		return ErrNotListening
	}
	return nil
}

// Run listens until ctx is cancelled, reconnecting after failures.
func (b *Bus) Run(ctx context.Context) error {
	err := b.l.Listen(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Subscribe returns a channel that receives a value (coalesced: at most one
// pending) whenever channel is notified with payload key, or with any payload
// when key is "". cancel stops the subscription.
func (b *Bus) Subscribe(channel, key string) (<-chan struct{}, func()) {
	s := &sub{ch: make(chan struct{}, 1)}
	b.mu.Lock()
	byKey, ok := b.subs[channel]
	if !ok {
		b.mu.Unlock()
		panic("bus: subscribe to unregistered channel " + channel)
	}
	if byKey[key] == nil {
		byKey[key] = map[*sub]struct{}{}
	}
	byKey[key][s] = struct{}{}
	b.mu.Unlock()
	return s.ch, func() {
		b.mu.Lock()
		delete(byKey[key], s)
		if len(byKey[key]) == 0 {
			delete(byKey, key)
		}
		b.mu.Unlock()
	}
}

func (b *Bus) ring(channel, payload string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, key := range []string{payload, ""} {
		for s := range b.subs[channel][key] {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (b *Bus) ringAll(channel string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, set := range b.subs[channel] {
		for s := range set {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}
