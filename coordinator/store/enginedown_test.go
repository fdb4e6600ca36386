package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
)

// Since when a node's Docker engine has not answered is stored from its
// Hello and from every heartbeat (under the session's epoch): the node reads
// it back with no free slot while the engine is down, and placement sees it
// on the candidate.
func TestNodeEngineDownStoredFromHelloAndHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	if _, err := rawSQL(t, db).Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	down := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 4, EngineDownSince: &down})
	if err != nil {
		t.Fatal(err)
	}
	if n.EngineDownSince == nil || !n.EngineDownSince.Equal(down) || n.FreeSlots() != 0 {
		t.Fatalf("after a Hello with the engine down: down since %v, %d free slots; want %s and none", n.EngineDownSince, n.FreeSlots(), down)
	}
	candidate := func() time.Time {
		t.Helper()
		cands, err := st.Candidates(ctx, time.Minute)
		if err != nil || len(cands) != 1 {
			t.Fatalf("candidates %v, %v; want node_a", cands, err)
		}
		return cands[0].EngineDownSince
	}
	beat := store.Heartbeat{NodeID: "node_a", Epoch: n.SessionEpoch, At: time.Now(), MaxTasks: 4, EngineDownSince: &down}
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if since := candidate(); !since.Equal(down) {
		t.Fatalf("candidate: engine down since %s, want %s", since, down)
	}

	// A heartbeat of an old session changes nothing; the next one with the
	// engine answering clears it.
	stale := beat
	stale.Epoch, stale.EngineDownSince = n.SessionEpoch-1, nil
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{stale}); err != nil {
		t.Fatal(err)
	}
	if since := candidate(); !since.Equal(down) {
		t.Fatalf("a heartbeat of an old session moved engine down since to %s", since)
	}
	beat.EngineDownSince = nil
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if since := candidate(); !since.IsZero() {
		t.Fatalf("after a heartbeat with the engine answering the candidate is down since %s", since)
	}
	if n, err = st.GetNode(ctx, "node_a"); err != nil || n.EngineDownSince != nil || n.FreeSlots() != 4 {
		t.Fatalf("after the engine answers: %v, %v, %d free slots; want never and 4", n.EngineDownSince, err, n.FreeSlots())
	}
}
