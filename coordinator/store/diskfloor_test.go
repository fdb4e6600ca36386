package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
)

// A node's free-space floor, and since when its data disk is below it, are
// stored from its Hello and from every heartbeat (under the session's
// epoch): the node reads them back with no free slot while below, and
// placement sees them on the candidate.
func TestNodeDiskFloorStoredFromHelloAndHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	if _, err := rawSQL(t, db).Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 4, DiskFreeMB: 5000,
		Disk: store.NodeDisk{MinFreeMB: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Disk.MinFreeMB != 1024 || n.Disk.LowSince != nil || n.FreeSlots() != 4 {
		t.Fatalf("after Hello: floor %d MiB, low since %v, %d free slots; want 1024, never, 4", n.Disk.MinFreeMB, n.Disk.LowSince, n.FreeSlots())
	}
	candidate := func() (free, floor int64, since time.Time) {
		t.Helper()
		cands, err := st.Candidates(ctx, time.Minute)
		if err != nil || len(cands) != 1 {
			t.Fatalf("candidates %v, %v; want node_a", cands, err)
		}
		return cands[0].DiskFreeMB, cands[0].MinFreeDiskMB, cands[0].DiskLowSince
	}

	low := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	beat := store.Heartbeat{NodeID: "node_a", Epoch: n.SessionEpoch, At: time.Now(), MaxTasks: 4, DiskFreeMB: 3,
		Disk: store.NodeDisk{MinFreeMB: 1024, LowSince: &low}}
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if n, err = st.GetNode(ctx, "node_a"); err != nil || n.Disk.LowSince == nil || !n.Disk.LowSince.Equal(low) || n.FreeSlots() != 0 {
		t.Fatalf("after a heartbeat below the floor: %+v, %v; want low since %s and no free slot", n.Disk, err, low)
	}
	if free, floor, since := candidate(); free != 3 || floor != 1024 || !since.Equal(low) {
		t.Fatalf("candidate: %d MiB free, floor %d, low since %s; want 3, 1024, %s", free, floor, since, low)
	}

	// A heartbeat of an old session changes nothing; the next one above the
	// floor clears it.
	stale := beat
	stale.Epoch, stale.Disk.LowSince = n.SessionEpoch-1, nil
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{stale}); err != nil {
		t.Fatal(err)
	}
	if _, _, since := candidate(); !since.Equal(low) {
		t.Fatalf("a heartbeat of an old session moved low since to %s", since)
	}
	beat.DiskFreeMB, beat.Disk.LowSince = 4000, nil
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if _, _, since := candidate(); !since.IsZero() {
		t.Fatalf("after a heartbeat above the floor the candidate is low since %s", since)
	}
}
