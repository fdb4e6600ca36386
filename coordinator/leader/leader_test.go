package leader_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/leader"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two electors on one database: exactly one leads, it is the one whose lease
// connection holds the lock, and only its worker runs.
func TestOneOfTwoLeads(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var c cluster
	a, b := c.start(t, db, "a", 200*time.Millisecond), c.start(t, db, "b", 200*time.Millisecond)
	leader, standby := waitLeader(t, a, b)
	if holder := lockHolder(t, db.URL); holder != leasePID(t, leader) {
		t.Fatalf("the leader lock is held by backend %d, not by the leader %s's lease connection (%d)", holder, leader.name, leasePID(t, leader))
	}
	if standby.e.Leading() || standby.worker.running.Load() {
		t.Fatalf("%s leads too (leading %v, worker running %v)", standby.name, standby.e.Leading(), standby.worker.running.Load())
	}
	if !leader.worker.running.Load() {
		t.Fatalf("the leader %s does not run its worker", leader.name)
	}
}

// When the leader's lease connection dies, its workers' context ends and the
// other elector leads, within its retry interval of finding the lock free.
func TestLostLeaseMovesLeadership(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var c cluster
	a, b := c.start(t, db, "a", 500*time.Millisecond), c.start(t, db, "b", 500*time.Millisecond)
	old, standby := waitLeader(t, a, b)

	killBackend(t, db.URL, leasePID(t, old))
	waitFor(t, 10*time.Second, "the old leader's worker to see its context end", func() bool { return !old.worker.running.Load() })
	waitFor(t, 10*time.Second, "the old leader to stop leading", func() bool { return !old.e.Leading() })
	waitFor(t, 10*time.Second, "the standby to lead", func() bool { return standby.e.Leading() && standby.worker.running.Load() })
	if holder := lockHolder(t, db.URL); holder != leasePID(t, standby) {
		t.Fatalf("the leader lock is held by backend %d, not by the new leader's lease connection (%d)", holder, leasePID(t, standby))
	}
}

// A leader that shuts down hands over at once. The standby has lost its
// first try, its retry is a minute away and no start-up ring of its bus is
// pending (see start), so only the hand-over's release and doorbell can make
// it lead within the wait below. The old leader's worker has returned before
// the new one's starts.
func TestShutdownHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var c cluster
	a, b := c.start(t, db, "a", time.Minute), c.start(t, db, "b", time.Minute)
	old, standby := waitLeader(t, a, b)
	waitStandingBy(t, standby)

	old.stop()
	select {
	case <-old.done:
	case <-time.After(15 * time.Second):
		t.Fatal("gave up after 15s waiting for the old leader's Run to return")
	}
	if old.e.Leading() || old.worker.running.Load() {
		t.Fatal("the old leader still leads after its Run returned")
	}
	waitFor(t, 15*time.Second, "the standby to lead (well before its one-minute retry)", func() bool {
		return standby.e.Leading() && standby.worker.running.Load()
	})
	if c.overlap.Load() {
		t.Fatal("the old and the new leader's workers ran at the same time")
	}
}

// A worker that stops while its replica leads makes the replica step down, and
// the standby, rung, takes over well before its one-minute retry.
func TestFailedWorkerStepsDown(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var c cluster
	a, b := c.start(t, db, "a", time.Minute), c.start(t, db, "b", time.Minute)
	old, standby := waitLeader(t, a, b)
	waitStandingBy(t, standby)

	old.worker.fail <- errors.New("the worker broke")
	waitFor(t, 15*time.Second, "the failed leader to step down", func() bool { return !old.e.Leading() })
	waitFor(t, 15*time.Second, "the standby to lead (well before its one-minute retry)", func() bool {
		return standby.e.Leading() && standby.worker.running.Load()
	})
	select {
	case <-old.done:
		t.Fatal("the elector that stepped down stopped competing")
	default:
	}
}

// cluster is the electors of one test; it notices two workers running at once.
type cluster struct {
	active  atomic.Int32
	overlap atomic.Bool
	buses   int
}

type replica struct {
	name   string
	e      *leader.Elector
	leases *lease.Keeper
	worker *probe
	stop   context.CancelFunc // ends the elector alone, as a shutdown does first
	done   chan struct{}      // closed when the elector's Run returned
	// standingBy counts the elector's lost tries for the lock.
	standingBy atomic.Int32
}

// start runs an elector with its own store, bus and lease keeper, all stopped
// when the test ends (the elector first). The elector starts only once its bus
// listens: the bus rings every subscriber when it starts listening, and a
// test that means to see a hand-over's doorbell wake the standby must not
// have that ring pending.
func (c *cluster) start(t *testing.T, db pgtest.Database, name string, retry time.Duration) *replica {
	t.Helper()
	r := &replica{name: name, done: make(chan struct{}), worker: &probe{cluster: c, fail: make(chan error, 1)}}
	out := slog.Handler(slog.DiscardHandler)
	if os.Getenv("PODIUM_TEST_LOG") != "" {
		out = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	log := slog.New(counting{Handler: out, msg: standingBy, n: &r.standingBy}).With("replica", name)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{leader.Channel}}, bus.Deps{Log: log})
	k := lease.NewKeeper(db.URL, log)
	svcCtx, stopSvcs := context.WithCancel(context.Background())
	var svcs errgroup.Group
	svcs.Go(func() error { return b.Run(svcCtx) })
	svcs.Go(func() error { return k.Run(svcCtx) })
	t.Cleanup(func() {
		stopSvcs()
		if err := svcs.Wait(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		st.Close()
	})
	c.buses++
	waitListening(t, db.URL, c.buses)

	r.leases = k
	r.e = leader.New(leader.Config{Retry: retry}, leader.Deps{Leases: k, Bus: b, Store: st, Log: log}, r.worker)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		defer close(r.done)
		if err := r.e.Run(ctx); err != nil {
			t.Errorf("%s: elector: %v", name, err)
		}
	}()
	t.Cleanup(func() { stop(); <-r.done })
	return r
}

// probe is a worker that runs until its context ends or it is told to fail.
type probe struct {
	cluster *cluster
	running atomic.Bool
	fail    chan error
}

func (p *probe) Run(ctx context.Context) error {
	if p.cluster.active.Add(1) > 1 {
		p.cluster.overlap.Store(true)
	}
	defer p.cluster.active.Add(-1)
	p.running.Store(true)
	defer p.running.Store(false)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-p.fail:
		return err
	}
}

// waitLeader waits for one of a and b to lead, and returns it first.
func waitLeader(t *testing.T, a, b *replica) (leader, standby *replica) {
	t.Helper()
	waitFor(t, 10*time.Second, "a leader", func() bool { return a.e.Leading() || b.e.Leading() })
	if a.e.Leading() && b.e.Leading() {
		t.Fatal("two leaders at once")
	}
	if b.e.Leading() {
		return b, a
	}
	return a, b
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leasePID(t *testing.T, r *replica) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := r.leases.Current(ctx)
	if err != nil {
		t.Fatalf("%s has no lease connection: %v", r.name, err)
	}
	return l.PID()
}

// query runs f on a connection of the test's own, apart from the electors'.
func query(t *testing.T, url string, f func(ctx context.Context, conn *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := f(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

// lockHolder is the backend pid holding the leader lock, 0 if none.
func lockHolder(t *testing.T, url string) uint32 {
	t.Helper()
	var pid uint32
	key := uint64(lease.LeaderKey)
	query(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		// A bigint advisory key is stored as its high and low 32 bits.
		// pg_locks shows every database's locks; advisory locks are per database.
		err := conn.QueryRow(ctx, `select pid from pg_locks where locktype = 'advisory' and granted
			and database = (select oid from pg_database where datname = current_database())
			and classid::bigint = $1 and objid::bigint = $2 and objsubid = 1`,
			int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return pid
}

func killBackend(t *testing.T, url string, pid uint32) {
	t.Helper()
	query(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		var ok bool
		if err := conn.QueryRow(ctx, "select pg_terminate_backend($1)", int(pid)).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return errors.New("pg_terminate_backend: no such backend")
		}
		return nil
	})
}

// waitListening waits for n buses to LISTEN on the leader's channel.
func waitListening(t *testing.T, url string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "the bus to listen for the hand-over doorbell", func() bool {
		var listening int
		query(t, url, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `select count(*) from pg_stat_activity
				where datname = current_database() and query like 'listen %' || $1 || '%'`, leader.Channel).Scan(&listening)
		})
		return listening >= n
	})
}

// standingBy is what an elector logs when it loses a try for the lock.
const standingBy = "another replica leads; standing by"

func waitStandingBy(t *testing.T, r *replica) {
	t.Helper()
	waitFor(t, 10*time.Second, r.name+" to lose a try for the lock", func() bool { return r.standingBy.Load() > 0 })
}

// counting counts the records with one message and passes every record on.
type counting struct {
	slog.Handler
	msg string
	n   *atomic.Int32
}

func (h counting) Enabled(context.Context, slog.Level) bool { return true }

func (h counting) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h counting) WithAttrs(as []slog.Attr) slog.Handler {
	return counting{Handler: h.Handler.WithAttrs(as), msg: h.msg, n: h.n}
}

func (h counting) WithGroup(name string) slog.Handler {
	return counting{Handler: h.Handler.WithGroup(name), msg: h.msg, n: h.n}
}
