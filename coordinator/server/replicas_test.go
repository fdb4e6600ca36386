package server_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A replica stopped the moment its row is written still takes the row out
// when it stops. CI found one stopped during its registration (between the
// insert and the doorbell) returning at once and leaving its row, so the other
// replicas named a replica that was gone to their nodes for a minute.
func TestReplicaStoppedWhileRegisteringLeavesTheList(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	listed := func(id string) bool {
		var n int
		if err := conn.QueryRow(ctx, "select count(*) from podium.replicas where id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	for round := range 12 {
		id := ids.New("replica")
		runCtx, stop := context.WithCancel(ctx)
		srv, err := server.New(runCtx, server.Config{DatabaseURL: db.URL, Listen: "127.0.0.1:0", Token: coordtest.Token,
			ReplicaID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			stop()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Run(runCtx) }()
		// Stop as soon as the row can be seen: read it back to back, not on a
		// poll interval, so the stop lands while the registration may still
		// be under way.
		deadline := time.Now().Add(30 * time.Second)
		for !listed(id) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the replica's row was never written", round)
			}
		}
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("round %d: Run returned %v", round, err)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: the replica did not stop", round)
		}
		if listed(id) {
			t.Fatalf("round %d: the replica stopped but is still in podium.replicas, so nodes are told to dial it", round)
		}
	}
}
