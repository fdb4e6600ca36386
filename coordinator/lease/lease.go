// Package lease holds a replica's advisory locks on one long-lived Postgres
// connection: the lock on every node whose stream the replica serves, and the
// leader lock. Session advisory locks live exactly as long as the connection,
// so the connection is the lease: when it breaks, every lock it held is gone,
// and the replica must act as if it holds nothing (Lost is closed).
//
// A lock has no fencing token, so the lock alone cannot stop a replica that has
// not yet noticed its loss from writing. Each node's session row carries an
// epoch for that; see store.IngestEvents.
package lease

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/store"
)

// LeaderKey is the advisory lock the scheduling and watchdog leader holds.
const LeaderKey int64 = 0x706f6469756d02

// NodeKey is the advisory lock key for a node.
func NodeKey(nodeID string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("podium.node:" + nodeID))
	return int64(h.Sum64())
}

// ErrLost is returned by a lease whose connection has broken.
var ErrLost = errors.New("lease: the lease connection is gone; every lock it held is released")

// Lease is one lease connection.
type Lease struct {
	mu     sync.Mutex
	conn   *pgx.Conn
	lost   chan struct{}
	once   sync.Once
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// IdleTimeout is how long Postgres keeps the lease connection while it hears
// nothing from the replica (idle_session_timeout, set on this connection
// alone). A healthy replica pings it every second (watch); one cut off from
// Postgres cannot, and its locks, the nodes' and the leader's, are released
// when Postgres ends the session, so that another replica can take them. Left
// to TCP, a connection whose peer went silent can stay up for hours, and the
// locks with it.
const IdleTimeout = 10 * time.Second

// pingEvery and pingTimeout: how often the lease connection is pinged, and
// how long a ping may take before the connection is given up for lost.
const (
	pingEvery   = time.Second
	pingTimeout = 3 * time.Second
)

// Open connects the lease connection and starts watching it. It must be a
// direct connection: behind PgBouncer in transaction mode session advisory locks
// are not held across statements.
func Open(ctx context.Context, url string, log *slog.Logger) (*Lease, error) {
	conn, err := store.ConnectDirect(ctx, url, "idle_session_timeout", strconv.Itoa(int(IdleTimeout/time.Millisecond)))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	l := &Lease{conn: conn, lost: make(chan struct{}), log: log, cancel: cancel, done: make(chan struct{})}
	go l.watch(wctx)
	return l, nil
}

// watch pings the connection so a dead lease is noticed within seconds even
// when nothing else uses it.
func (l *Lease) watch(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.lost:
			return
		case <-t.C:
			l.mu.Lock()
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := l.conn.Ping(pctx)
			cancel()
			l.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				l.log.Error("lease: connection lost; releasing every session and leadership", "err", err)
				l.markLost()
				return
			}
		}
	}
}

func (l *Lease) markLost() { l.once.Do(func() { close(l.lost) }) }

// Lost is closed when the lease connection breaks.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// PID is the backend pid of the lease connection (tests kill it to simulate a
// replica losing its lease).
func (l *Lease) PID() uint32 { return l.conn.PgConn().PID() }

func (l *Lease) exec(ctx context.Context, sql string, key int64) (bool, error) {
	select {
	case <-l.lost:
		return false, ErrLost
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The caller's context is deliberately not passed to the statement: pgx
	// answers a context cancelled mid-query by closing the connection, and on
	// this connection that would release every lock the replica holds because
	// one node gave up its Hello. The statement gets its own short timeout; the
	// caller's context only decides whether to wait for the mutex above.
	if err := ctx.Err(); err != nil {
		return false, err
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var ok bool
	if err := l.conn.QueryRow(qctx, sql, key).Scan(&ok); err != nil {
		if l.conn.IsClosed() {
			l.log.Error("lease: connection lost; releasing every session and leadership", "err", err)
			l.markLost()
			return false, errors.Join(ErrLost, err)
		}
		return false, err
	}
	return ok, nil
}

// TryLock takes the advisory lock key if nobody holds it.
func (l *Lease) TryLock(ctx context.Context, key int64) (bool, error) {
	return l.exec(ctx, "select pg_try_advisory_lock($1)", key)
}

// Unlock releases the advisory lock key.
func (l *Lease) Unlock(ctx context.Context, key int64) error {
	_, err := l.exec(ctx, "select pg_advisory_unlock($1)", key)
	return err
}

// Close releases every lock by closing the connection.
func (l *Lease) Close() {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	// Closing sends Postgres a goodbye; on a dead link it would wait for it.
	// Either way the locks go: with the connection, or with the session
	// Postgres ends once it has been idle IdleTimeout.
	cctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	_ = l.conn.Close(cctx)
	l.markLost()
}
