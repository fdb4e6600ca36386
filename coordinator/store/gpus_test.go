package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A node's GPUs are stored from its Hello and replaced by a heartbeat only
// when it says they changed (and only under the session's epoch); a heartbeat
// that does not leaves them as they are. Placement sees them with the GPUs
// the node's active tasks hold, and a claimed task offers what it asks of
// them.
func TestNodeGPUsStoredAtHelloAndWhenTheyChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	if _, err := rawSQL(t, db).Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	hello := []store.NodeGPU{{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMB: 15360},
		{Index: 1, UUID: "GPU-1", Model: "Tesla T4", MemoryMB: 15360}}
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 4, GPUs: hello})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(n.GPUs, hello) {
		t.Fatalf("after Hello the node has GPUs %+v, want %+v", n.GPUs, hello)
	}
	gpusOf := func() []store.NodeGPU {
		t.Helper()
		n, err := st.GetNode(ctx, "node_a")
		if err != nil {
			t.Fatal(err)
		}
		return n.GPUs
	}

	// A heartbeat that changes nothing leaves them; one from an old epoch
	// cannot change them.
	beat := store.Heartbeat{NodeID: "node_a", Epoch: n.SessionEpoch, At: time.Now(), MaxTasks: 4}
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if got := gpusOf(); !slices.Equal(got, hello) {
		t.Fatalf("after a heartbeat without a change the node has GPUs %+v, want the Hello's", got)
	}
	stale := beat
	stale.Epoch, stale.GPUsChanged = n.SessionEpoch-1, true
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{stale}); err != nil {
		t.Fatal(err)
	}
	if got := gpusOf(); !slices.Equal(got, hello) {
		t.Fatalf("a heartbeat of an old session changed the GPUs to %+v", got)
	}
	changed := []store.NodeGPU{hello[0], {Index: 1, UUID: "GPU-9", Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}, hello[1]}
	beat.GPUsChanged, beat.GPUs = true, changed
	if _, err := st.FlushHeartbeats(ctx, []store.Heartbeat{beat}); err != nil {
		t.Fatal(err)
	}
	if got := gpusOf(); !slices.Equal(got, changed) {
		t.Fatalf("after a heartbeat with new GPUs the node has %+v, want %+v", got, changed)
	}

	// A task asking for GPUs offers what it asks; placed, its GPUs count
	// against the node.
	spec := &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{Gpus: 2, GpuModel: "Tesla*", GpuMemoryMb: 15000}}
	if _, err := st.InsertTask(ctx, newTask("task_g", spec, "me")); err != nil {
		t.Fatal(err)
	}
	var need store.Need
	if _, _, err := st.DispatchPass(ctx, 10, func(c store.Claimed) store.Verdict {
		need = c.Need
		return store.Verdict{Why: "test"}
	}); err != nil {
		t.Fatal(err)
	}
	if need.GPUs != 2 || need.GPUModel != "Tesla*" || need.GPUMemoryMB != 15000 {
		t.Fatalf("offered %+v, want 2 GPUs matching Tesla* with 15000 MiB", need)
	}
	placed, _ := runPass(t, st, 10)
	if len(placed) != 1 || placed[0].NodeID != "node_a" {
		t.Fatalf("placed %+v, want task_g on node_a (two T4s free)", placed)
	}
	fleet, err := st.Candidates(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(fleet) != 1 || len(fleet[0].GPUs) != 3 || fleet[0].CommittedGPUs != 2 || fleet[0].GPUs[1].Model != "NVIDIA H100 80GB HBM3" {
		t.Fatalf("candidates %+v, want node_a with its 3 GPUs, 2 of them committed", fleet)
	}
	if n, err := st.GetNode(ctx, "node_a"); err != nil || n.GPUsInUse != 2 {
		t.Fatalf("the node shows %d GPUs in use (%v), want 2", n.GPUsInUse, err)
	}
	// A second such task waits: the node's matching GPUs are all held.
	if _, err := st.InsertTask(ctx, newTask("task_h", spec, "me")); err != nil {
		t.Fatal(err)
	}
	if placed, waiting := runPass(t, st, 10); len(placed) != 0 || waiting != 1 {
		t.Fatalf("placed %+v with %d waiting, want task_h waiting", placed, waiting)
	}
	if tk, err := st.GetTask(ctx, "task_h"); err != nil || tk.Reason != `no connected node has 2 free GPUs matching "Tesla*" with at least 15000 MiB (largest: 0)` {
		t.Fatalf("task_h waits with reason %q (%v)", tk.Reason, err)
	}
}
