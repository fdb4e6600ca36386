package integration_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/watchdog"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The thresholds are stored once for every replica: a replica started with
// explicit values stores them, one started without any reads them, one
// started with a different value replaces it for everyone and says whose it
// replaced, and one whose value cannot work with the stored ones is refused,
// saying what to change, and changes nothing.
func TestThresholdsSharedByReplicas(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fast := nodes.Config{HeartbeatInterval: time.Second}
	a := coordtest.Start(t, db.URL, coordtest.Options{Nodes: fast,
		Watchdog: watchdog.Config{UnreachableAfter: 3 * time.Second, OfflineAfter: 9 * time.Second},
		Dispatch: dispatch.Config{AckDeadline: 4 * time.Second, WriteOffAfter: 7 * time.Second}})
	want := server.Thresholds{UnreachableAfter: 3 * time.Second, OfflineAfter: 9 * time.Second, AckDeadline: 4 * time.Second, WriteOffAfter: 7 * time.Second}
	if got := a.Thresholds(); got != want {
		t.Fatalf("A uses %+v, want %+v", got, want)
	}

	// B is given none: it uses A's, not the defaults.
	b := coordtest.Start(t, db.URL, coordtest.Options{Nodes: fast})
	if got := b.Thresholds(); got != want {
		t.Fatalf("B, given no thresholds, uses %+v, want the stored %+v", got, want)
	}

	// C is given another offline threshold: it replaces the stored one for
	// every replica and warns whose it replaced; the rest stay.
	var log syncBuffer
	c := coordtest.Start(t, db.URL, coordtest.Options{Nodes: fast, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Watchdog: watchdog.Config{OfflineAfter: 20 * time.Second}})
	want.OfflineAfter = 20 * time.Second
	if got := c.Thresholds(); got != want {
		t.Fatalf("C uses %+v, want %+v", got, want)
	}
	stored, err := a.Store().Thresholds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stored.OfflineAfter != 20*time.Second || stored.UnreachableAfter != 3*time.Second || stored.SetBy != c.ReplicaID() {
		t.Fatalf("stored %+v", stored)
	}
	// A node is told them in HelloAck, by any replica.
	id, key := enroll(t, b)
	node, ack := connectNode(t, ctx, b, id, key)
	if ack.GetUnreachableAfterMs() != 3000 || ack.GetOfflineAfterMs() != 20000 {
		t.Fatalf("HelloAck from B says unreachable %d ms, offline %d ms; want the stored 3000, 20000", ack.GetUnreachableAfterMs(), ack.GetOfflineAfterMs())
	}
	_ = node.stream.CloseRequest()
	_ = node.stream.CloseResponse()
	if l := log.String(); !strings.Contains(l, "replace the stored ones") || !strings.Contains(l, "set_by="+a.ReplicaID()) {
		t.Fatalf("C's log does not warn that it replaced A's thresholds:\n%s", l)
	}

	// D heartbeats every 10 s (the default) and is given an unreachable
	// threshold of 30 s, longer than the stored offline one: refused.
	_, err = server.New(ctx, server.Config{DatabaseURL: db.URL, Listen: "127.0.0.1:0", Token: coordtest.Token,
		Thresholds: server.Thresholds{UnreachableAfter: 30 * time.Second}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("a replica whose thresholds do not fit the stored ones started")
	}
	for _, says := range []string{"set by replica " + c.ReplicaID(), "--offline-after 20s is not longer than --unreachable-after 30s", "raise --offline-after"} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("refusal %q does not say %q", err, says)
		}
	}
	if again, err := a.Store().Thresholds(ctx); err != nil || again != stored {
		t.Fatalf("a refused replica changed the stored thresholds: %+v %v", again, err)
	}

}

// A leader takes thresholds another replica stored at its next sweep, not at
// its next term: with the leader's own at an hour, a node that stops
// heartbeating goes offline within seconds of a replica storing 1 s and 2 s.
func TestLeaderTakesStoredThresholds(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fast := nodes.Config{HeartbeatInterval: 500 * time.Millisecond} // told in HelloAck; the sim node never beats
	a := coordtest.Start(t, db.URL, coordtest.Options{Nodes: fast,
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: time.Hour, OfflineAfter: 2 * time.Hour}})
	coordtest.Eventually(t, 10*time.Second, "A to lead", a.Leading)
	id, key := enroll(t, a)
	node, _ := connectNode(t, ctx, a, id, key)
	defer func() {
		_ = node.stream.CloseRequest()
		_ = node.stream.CloseResponse()
	}()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	coordtest.Start(t, db.URL, coordtest.Options{Nodes: fast,
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: time.Second, OfflineAfter: 2 * time.Second}})
	coordtest.Eventually(t, 20*time.Second, "the node to go offline by the stored thresholds", func() bool {
		var status string
		if err := conn.QueryRow(ctx, "select status from podium.nodes where id = $1", id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		return status == "offline"
	})
}
