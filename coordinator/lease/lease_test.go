package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

func open(t *testing.T, url string) *lease.Lease {
	t.Helper()
	l, err := lease.Open(context.Background(), url, quiet)
	if err != nil {
		t.Fatalf("open a lease: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// sql runs one statement on a connection of its own, as an operator (or a
// failing network) would, and returns the single value it selects.
func sql[T any](t *testing.T, url, q string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func kill(t *testing.T, url string, pid uint32) {
	t.Helper()
	if !sql[bool](t, url, "select pg_terminate_backend($1)", int(pid)) {
		t.Fatalf("backend %d was not terminated", pid)
	}
}

func tryLock(t *testing.T, l *lease.Lease, key int64) bool {
	t.Helper()
	ok, err := l.TryLock(context.Background(), key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	return ok
}

func locksHeldBy(t *testing.T, url string, pid uint32) int64 {
	t.Helper()
	return sql[int64](t, url, "select count(*) from pg_locks where locktype = 'advisory' and granted and pid = $1", int(pid))
}

// A lock is held by the lease connection itself: another lease cannot take
// it until it is unlocked, and Postgres shows it on that connection's backend.
func TestLockIsHeldOnTheLeaseConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db.URL), open(t, db.URL)
	key := lease.NodeKey("node_a")

	if !tryLock(t, a, key) {
		t.Fatal("a free lock was refused")
	}
	if tryLock(t, b, key) {
		t.Fatal("a second lease took a lock the first holds")
	}
	if n := locksHeldBy(t, db.URL, a.PID()); n != 1 {
		t.Fatalf("the lease connection holds %d advisory locks, want 1", n)
	}
	if err := a.Unlock(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if !tryLock(t, b, key) {
		t.Fatal("an unlocked lock could not be taken by the other lease")
	}
	if n := locksHeldBy(t, db.URL, b.PID()); n != 1 {
		t.Fatalf("the second lease connection holds %d advisory locks, want 1", n)
	}
}

// When the lease connection dies, Lost is closed without anyone using the
// lease (its own pings notice), every lock it held is free for another lease,
// and the dead lease refuses to lock anything with ErrLost.
func TestLeaseIsLostWithItsConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db.URL), open(t, db.URL)
	if !tryLock(t, a, lease.LeaderKey) || !tryLock(t, a, lease.NodeKey("node_a")) {
		t.Fatal("free locks were refused")
	}
	kill(t, db.URL, a.PID())
	wait.Closed(t, 30*time.Second, "Lost to close after the lease connection was terminated", a.Lost())
	for _, key := range []int64{lease.LeaderKey, lease.NodeKey("node_a")} {
		wait.For(t, 10*time.Second, "the dead lease's locks to be free for another lease", func() bool { return tryLock(t, b, key) })
	}
	if _, err := a.TryLock(context.Background(), lease.NodeKey("node_b")); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("TryLock on a lost lease: %v, want ErrLost", err)
	}
}

// A caller giving up (its context cancelled, say a node that hung up in the
// middle of its Hello) must not cost the replica its lease: the lease
// connection stays up and every lock on it stays held.
func TestCancelledCallerKeepsTheLease(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db.URL), open(t, db.URL)
	held := lease.NodeKey("node_held")
	if !tryLock(t, a, held) {
		t.Fatal("a free lock was refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.TryLock(ctx, lease.NodeKey("node_other")); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock with a cancelled context: %v, want context.Canceled", err)
	}
	select {
	case <-a.Lost():
		t.Fatal("a cancelled caller lost the lease")
	default:
	}
	if tryLock(t, b, held) {
		t.Fatal("the lock was released by a cancelled caller")
	}
	if !tryLock(t, a, lease.NodeKey("node_other")) {
		t.Fatal("the lease cannot lock after a cancelled call")
	}
}

// Close releases every lock at once and marks the lease lost.
func TestCloseReleasesEveryLock(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a, b := open(t, db.URL), open(t, db.URL)
	keys := []int64{lease.LeaderKey, lease.NodeKey("node_a"), lease.NodeKey("node_b")}
	for _, k := range keys {
		if !tryLock(t, a, k) {
			t.Fatal("a free lock was refused")
		}
	}
	a.Close()
	wait.Closed(t, time.Second, "Lost after Close", a.Lost())
	// The backend lets go as it exits, a moment after the client hangs up.
	for _, k := range keys {
		wait.For(t, 10*time.Second, "every lock to be free after Close", func() bool { return tryLock(t, b, k) })
	}
}

// The keeper replaces a lost lease with a new connection, and Current hands
// out only a live one; when its context ends, the lease it holds is closed.
func TestKeeperReopensALostLease(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	k := lease.NewKeeper(db.URL, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	first, err := k.Current(wctx)
	if err != nil {
		t.Fatalf("waiting for the first lease: %v", err)
	}
	if !tryLock(t, first, lease.LeaderKey) {
		t.Fatal("a free lock was refused")
	}
	kill(t, db.URL, first.PID())
	wait.Closed(t, 30*time.Second, "the first lease to be lost", first.Lost())
	second, err := k.Current(wctx)
	if err != nil {
		t.Fatalf("waiting for a new lease after the first was lost: %v", err)
	}
	if second == first || second.PID() == first.PID() {
		t.Fatal("Current returned the lost lease")
	}
	wait.For(t, 10*time.Second, "the new lease to take the lock the lost one held", func() bool {
		return tryLock(t, second, lease.LeaderKey)
	})
	cancel()
	wait.Closed(t, 30*time.Second, "Run to return once its context ended", done)
	wait.Closed(t, time.Second, "the keeper's lease to be closed when Run returned", second.Lost())
	wait.For(t, 10*time.Second, "the stopped keeper's locks to be released", func() bool {
		return locksHeldBy(t, db.URL, second.PID()) == 0
	})
}

// Node keys are stable, distinct per node, and never the leader's.
func TestNodeKeys(t *testing.T) {
	if a, again := lease.NodeKey("node_a"), lease.NodeKey("node"+"_a"); a != again {
		t.Fatal("NodeKey is not stable")
	}
	if lease.NodeKey("node_a") == lease.NodeKey("node_b") {
		t.Fatal("two nodes share a lock key")
	}
	if lease.NodeKey("node_a") == lease.LeaderKey {
		t.Fatal("a node's key is the leader's")
	}
}
