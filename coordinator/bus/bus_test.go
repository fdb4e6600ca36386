package bus_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A doorbell that should ring comes within this; one that should not is
// checked after one that should, which the same notification rang.
const ring = 30 * time.Second

// run starts the bus until the test ends and checks that it stops cleanly.
func run(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := wait.Recv(t, ring, "the bus to stop", errc); err != nil {
			t.Errorf("Run after its context ended: %v, want nil", err)
		}
	})
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

func notify(t *testing.T, conn *pgx.Conn, channel, payload string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "select pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(err)
	}
}

func silent(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s was rung", what)
	default:
	}
}

// A NOTIFY reaches the subscribers of its channel whose key is its payload,
// and those that asked for every payload; nobody else. Every subscriber is
// rung once when the listener first connects (there may be something it
// missed before). A cancelled subscription is rung no more.
func TestNotifyRingsTheSubscribersOfItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	m := metrics.New(st, func() int { return 0 }, slog.New(slog.DiscardHandler))
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{"chan_a", "chan_b"}},
		bus.Deps{Metrics: m, Log: slog.New(slog.DiscardHandler)})
	node1, cancelNode1 := b.Subscribe("chan_a", "node_1")
	anyA, cancelAnyA := b.Subscribe("chan_a", "")
	defer cancelAnyA()
	node2, cancelNode2 := b.Subscribe("chan_a", "node_2")
	defer cancelNode2()
	otherChan, cancelOther := b.Subscribe("chan_b", "node_1")
	defer cancelOther()
	run(t, b)

	// The ring on connect also says the channel is being listened to.
	for what, ch := range map[string]<-chan struct{}{"node_1": node1, "every payload": anyA, "node_2": node2, "chan_b": otherChan} {
		wait.Recv(t, ring, "the ring on connect for the subscriber of "+what, ch)
	}
	conn := connect(t, db.URL)

	notify(t, conn, "chan_a", "node_1")
	wait.Recv(t, ring, "node_1's subscriber to be rung", node1)
	wait.Recv(t, ring, "the every-payload subscriber to be rung", anyA)
	silent(t, "node_2's subscriber", node2)
	silent(t, "chan_b's subscriber", otherChan)

	notify(t, conn, "chan_b", "node_1")
	wait.Recv(t, ring, "chan_b's subscriber to be rung", otherChan)
	silent(t, "chan_a's subscriber", node1)

	cancelNode1()
	notify(t, conn, "chan_a", "node_1")
	wait.Recv(t, ring, "the every-payload subscriber to be rung", anyA)
	silent(t, "a cancelled subscription", node1)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`podium_bus_deliveries_total{channel="chan_a"} 2`, `podium_bus_deliveries_total{channel="chan_b"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, rec.Body.String())
		}
	}
}

// Rings coalesce: a subscriber that has not looked yet has one pending ring,
// however many notifications came, and nobody blocks on it.
func TestRingsCoalesce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{"chan_a"}}, bus.Deps{Log: slog.New(slog.DiscardHandler)})
	slow, cancelSlow := b.Subscribe("chan_a", "node_1")
	defer cancelSlow()
	marker, cancelMarker := b.Subscribe("chan_a", "last")
	defer cancelMarker()
	run(t, b)
	wait.Recv(t, ring, "the ring on connect", slow)
	wait.Recv(t, ring, "the ring on connect", marker)
	conn := connect(t, db.URL)
	for range 5 {
		notify(t, conn, "chan_a", "node_1")
	}
	notify(t, conn, "chan_a", "last") // delivered in order, after the five
	wait.Recv(t, ring, "the marker notification", marker)
	wait.Recv(t, ring, "the pending ring", slow)
	silent(t, "a subscriber already rung for five coalesced notifications", slow)
}

// When the listening connection dies, the bus connects again and rings every
// subscriber once, since whatever was notified meanwhile is lost; after that
// notifications arrive as before.
func TestListenerReconnectsAndRingsEveryone(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{"chan_a"}}, bus.Deps{Log: slog.New(slog.DiscardHandler)})
	node1, cancel1 := b.Subscribe("chan_a", "node_1")
	defer cancel1()
	node2, cancel2 := b.Subscribe("chan_a", "node_2")
	defer cancel2()
	run(t, b)
	wait.Recv(t, ring, "the ring on connect", node1)
	wait.Recv(t, ring, "the ring on connect", node2)

	conn := connect(t, db.URL)
	listener := func() (pids []int32) {
		rows, err := conn.Query(context.Background(),
			"select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	old := listener()
	if len(old) != 1 {
		t.Fatalf("backends of the bus: %v, want its one listening connection", old)
	}
	var ok bool
	if err := conn.QueryRow(context.Background(), "select pg_terminate_backend($1)", old[0]).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the listener's backend: %v %v", ok, err)
	}
	// Lost while the listener is away, or not: either way the reconnect rings.
	notify(t, conn, "chan_a", "node_2")

	wait.Recv(t, ring, "node_1's subscriber to be rung after the reconnect", node1)
	wait.Recv(t, ring, "node_2's subscriber to be rung after the reconnect", node2)
	if now := listener(); len(now) != 1 || now[0] == old[0] {
		t.Fatalf("backends of the bus after the reconnect: %v (the killed one was %d)", now, old[0])
	}
	notify(t, conn, "chan_a", "node_1")
	wait.Recv(t, ring, "a notification after the reconnect", node1)
}

// Subscribing to a channel the bus was not made for is a programming error,
// caught at once rather than by a doorbell that never rings.
func TestSubscribeToAnUnknownChannelPanics(t *testing.T) {
	b := bus.New(bus.Config{DatabaseURL: "postgres://unused", Channels: []string{"chan_a"}}, bus.Deps{Log: slog.New(slog.DiscardHandler)})
	defer func() {
		if recover() == nil {
			t.Fatal("Subscribe to an unregistered channel did not panic")
		}
	}()
	b.Subscribe("chan_nope", "")
}
