package integration_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A node's limits on one task (podium-agent --max-*, --allow-egress), reported
// in its Hello, keep the scheduler from sending it a task that asks for more:
// the task waits with a reason naming the limit and the most any node allows,
// and goes to a node that allows it once one connects. A node with roomy
// capacity but a low maximum still takes the tasks within it.
func TestNodeLimitsKeepTasksOffNodesThatDoNotAllowThem(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	smallID, smallKey := enroll(t, r)
	small := connectWith(t, ctx, r, smallID, smallKey, &podiumv1.Capacity{CpuCores: 16, MemoryMb: 65536, MaxTasks: 4,
		Limits: &podiumv1.TaskLimits{MaxMemoryMb: 4096, MaxPids: 1000, MaxTimeoutSeconds: 3600, PermitEgress: []string{"10.0.0.0/8"}}})

	bigMem := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{MemoryMb: 8192}})
	waitReason(t, ctx, r, bigMem, "cannot run on any node: no node allows 8 GiB of memory for one task (largest: 4 GiB)")
	farEgress := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", AllowEgress: []string{"192.168.0.0/16"}})
	waitReason(t, ctx, r, farEgress, "cannot run on any node: no node permits egress to 192.168.0.0/16")
	longRun := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 7200})
	waitReason(t, ctx, r, longRun, "cannot run on any node: no node allows a timeout of 2h0m0s for one task (largest: 1h0m0s)")

	// Within every limit: the small node takes it, and it is the first
	// assignment the small node sees.
	within := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 600, AllowEgress: []string{"10.1.0.0/16"},
		Resources: &podiumv1.Resources{MemoryMb: 1024, Pids: 500}})
	if a := assignOf(t, small); a.TaskId != within {
		t.Fatalf("the small node was assigned %s first, want %s, the only task within its limits", a.TaskId, within)
	}

	// What an admin reads of the node says why.
	nodes, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Msg.GetNodes() {
		if l := n.GetCapacity().GetLimits(); n.GetId() == smallID && (l.GetMaxMemoryMb() != 4096 || !slices.Equal(l.GetPermitEgress(), []string{"10.0.0.0/8"})) {
			t.Errorf("the admin API shows the small node's limits as %v, want what its Hello said", l)
		}
	}

	bigID, bigKey := enroll(t, r)
	big := connectWith(t, ctx, r, bigID, bigKey, &podiumv1.Capacity{MaxTasks: 4,
		Limits: &podiumv1.TaskLimits{MaxMemoryMb: 16384, PermitEgress: []string{"192.168.0.0/16", "10.0.0.0/8"}}})
	got := map[string]bool{}
	for range 3 {
		got[assignOf(t, big).TaskId] = true
	}
	if !got[bigMem] || !got[farEgress] || !got[longRun] {
		t.Fatalf("the node that allows them was assigned %v, want %s, %s and %s", got, bigMem, farEgress, longRun)
	}
	for _, id := range []string{bigMem, farEgress, longRun} {
		if tk := getTask(t, ctx, r, id); tk.GetNodeId() != bigID || tk.GetReason() != "" {
			t.Errorf("task %s is on %q with reason %q, want on %s with its reason cleared", id, tk.GetNodeId(), tk.GetReason(), bigID)
		}
	}
}
