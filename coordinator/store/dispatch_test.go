package store_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// runPass runs one dispatch pass the way the dispatcher does: placement's
// rule on the fleet as read now, each placement charged to its node
// (dispatch.PlaceOn).
func runPass(t *testing.T, st *store.Store, batch int) ([]store.Placement, int) {
	t.Helper()
	ctx := context.Background()
	nodes, err := st.Candidates(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	placed, waiting, err := st.DispatchPass(ctx, batch, dispatch.PlaceOn(dispatch.Fleet(nodes), time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return placed, waiting
}

// Which task is placed first is decided in the statement that claims them
// (package placement only picks the node): highest priority, then the oldest,
// then the lowest id; and a pass claims no more than its batch.
func TestDispatchPassOffersHighestPriorityThenOldestThenLowestID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tasks := []struct {
		id       string
		priority int32
		created  time.Time
	}{
		{"task_a", 0, t0},                                    // 7th: low priority, however new
		{"task_b", 5, t0.Add(2 * time.Second)},               // 4th: the newest of priority 5
		{"task_c", 5, t0.Add(time.Second)},                   // 2nd: as old as d, lower id
		{"task_d", 5, t0.Add(time.Second)},                   // 3rd
		{"task_e", 9, t0.Add(time.Hour)},                     // 1st: highest priority, however new
		{"task_f", 0, t0.Add(-time.Hour)},                    // 5th: the oldest of priority 0
		{"task_g", -1, t0.Add(-24 * time.Hour)},              // not claimed: last, past the batch
		{"task_h", 0, t0.Add(-time.Hour + time.Microsecond)}, // 6th: a microsecond after f
	}
	var in []store.NewTask
	for _, tk := range tasks {
		in = append(in, store.NewTask{ID: tk.id, Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: tk.priority}})
	}
	if _, err := st.InsertTasks(ctx, in); err != nil {
		t.Fatal(err)
	}
	sql := rawSQL(t, db)
	for _, tk := range tasks {
		if _, err := sql.Exec(ctx, "update podium.tasks set created_at = $2 where id = $1", tk.id, tk.created); err != nil {
			t.Fatal(err)
		}
	}

	var offered []string
	const why = "test: no node for it"
	placed, waiting, err := st.DispatchPass(ctx, len(tasks)-1, func(c store.Claimed) store.Verdict {
		offered = append(offered, c.ID)
		return store.Verdict{Why: why}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"task_e", "task_c", "task_d", "task_b", "task_f", "task_h", "task_a"}
	if !slices.Equal(offered, want) {
		t.Fatalf("offered %v, want %v: priority first, then created_at, then id", offered, want)
	}
	if len(placed) != 0 || waiting != len(want) {
		t.Fatalf("placed %d and %d waiting, want none placed and %d waiting", len(placed), waiting, len(want))
	}
	// The reason a task waits is stored for its owner to read.
	task, err := st.GetTask(ctx, "task_a")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != store.Queued || task.Reason != why {
		t.Fatalf("waiting task is %s with reason %q, want queued with %q", task.State, task.Reason, why)
	}
}

// What a claimed task asks of a node is what was stored with it: its labels,
// its Cost, sidecars included, and what a node's limits are checked against.
func TestDispatchPassOffersTheStoredNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openStore(t)
	spec := &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu", "ssd"},
		Resources: &podiumv1.Resources{Cpu: 0.5, MemoryMb: 256, Pids: 100},
		Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 1024, Pids: 50}},
			{Name: "log", Image: "busybox"}},
		TimeoutSeconds: 7200, OutputLimitBytes: 3 << 30, AllowEgress: []string{"10.0.0.0/8", "169.254.169.254/32"}}
	if _, err := st.InsertTask(ctx, newTask("task_x", spec, "me")); err != nil {
		t.Fatal(err)
	}
	var got store.Need
	if _, _, err := st.DispatchPass(ctx, 10, func(c store.Claimed) store.Verdict {
		got = c.Need
		return store.Verdict{Why: "test"}
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Labels, spec.Labels) || got.CPU != 1.5 || got.MemoryMB != 1280 {
		t.Fatalf("offered %+v, want labels %v, 1.5 CPU and 1280 MB (the sidecar counts)", got, spec.Labels)
	}
	wantEgress := []string{"10.0.0.0/8", "169.254.169.254/32"} // parsed by dispatch (TestFleetAndNeedAreWhatPlacementReads)
	if got.Pids != 150 || got.TimeoutSeconds != 7200 || got.OutputLimitBytes != 3<<30 || !slices.Equal(got.AllowEgress, wantEgress) {
		t.Fatalf("offered %+v, want 150 pids (the sidecar counts), a 7200 s timeout, 3 GiB of output and egress %v", got, wantEgress)
	}
}

// The limits a node's Hello reports are what placement sees of it, and what
// an admin reads; a reconnect with other limits replaces them.
func TestCandidatesCarryTheNodesLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	if _, err := rawSQL(t, db).Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	limits := store.NodeLimits{MaxCPU: 2.5, MaxMemoryMB: 4096, MaxPids: 4096, MaxTimeoutSeconds: 3600,
		MaxOutputBytes: 1 << 30, PermitEgress: []string{"10.0.0.0/8"}, AllowPrivilegedSidecars: true}
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 2, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if n.Limits.MaxCPU != 2.5 || n.Limits.MaxMemoryMB != 4096 || n.Limits.MaxPids != 4096 || n.Limits.MaxTimeoutSeconds != 3600 ||
		n.Limits.MaxOutputBytes != 1<<30 || !slices.Equal(n.Limits.PermitEgress, limits.PermitEgress) || !n.Limits.AllowPrivilegedSidecars {
		t.Fatalf("the node row has limits %+v, want %+v", n.Limits, limits)
	}
	fleet, err := st.Candidates(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := placement.Limits{MaxCPU: 2.5, MaxMemoryMB: 4096, MaxPids: 4096, MaxTimeoutSeconds: 3600, MaxOutputBytes: 1 << 30,
		PermitEgress: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, AllowPrivilegedSidecars: true}
	if len(fleet) != 1 || !sameLimits(dispatch.Fleet(fleet)[0].Limits, want) {
		t.Fatalf("candidates %+v, want node_a with limits %+v", fleet, want)
	}
	// The agent restarted without limits.
	if _, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	if fleet, err = st.Candidates(ctx, time.Minute); err != nil || len(fleet) != 1 || !sameLimits(dispatch.Fleet(fleet)[0].Limits, placement.Limits{}) {
		t.Fatalf("after a Hello without limits the candidate has %+v (%v), want none", fleet, err)
	}
}

// A node the control plane has not heard from for the unreachable threshold
// is offered nothing, even while its row still says online: after every
// replica restarted, a node of the previous run keeps that row until the
// watchdog's first verdict, which waits the whole period for it to
// reconnect. A task placed on a node that never does would be lost with it.
func TestCandidatesLeaveOutANodeSilentPastUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	for _, id := range []string{"node_live", "node_gone"} {
		if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ($1, '\\x00')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := st.StartSession(ctx, store.SessionStart{NodeID: id, Replica: "r1", MaxTasks: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sql.Exec(ctx, "update podium.nodes set last_heartbeat_at = now() - interval '65 minutes' where id = 'node_gone'"); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := sql.QueryRow(ctx, "select status from podium.nodes where id = 'node_gone'").Scan(&status); err != nil || status != "online" {
		t.Fatalf("node_gone's row says %q (%v), want online: the case is a row the watchdog has not judged yet", status, err)
	}
	fleet, err := st.Candidates(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range fleet {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []string{"node_live"}) {
		t.Fatalf("candidates %v, want only node_live: node_gone has been silent for 65 minutes", ids)
	}
	if _, err := st.InsertTasks(ctx, []store.NewTask{{ID: "task_a", Spec: &podiumv1.TaskSpec{Image: "busybox"}}}); err != nil {
		t.Fatal(err)
	}
	placed, _ := runPass(t, st, 10)
	if len(placed) != 1 || placed[0].NodeID != "node_live" {
		t.Fatalf("placed %+v, want task_a on node_live", placed)
	}
}

func sameLimits(a, b placement.Limits) bool {
	return a.MaxCPU == b.MaxCPU && a.MaxMemoryMB == b.MaxMemoryMB && a.MaxPids == b.MaxPids &&
		a.MaxTimeoutSeconds == b.MaxTimeoutSeconds && a.MaxOutputBytes == b.MaxOutputBytes && slices.Equal(a.PermitEgress, b.PermitEgress) &&
		a.AllowPrivilegedSidecars == b.AllowPrivilegedSidecars
}

// A task with a privileged sidecar is offered as needing a node that allows
// them, from the column stored beside its spec; a sidecar that only shares
// the workspace, or says privileged: false, asks nothing of the node.
func TestDispatchPassOffersPrivilegedSidecarsAsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	specs := map[string]*podiumv1.TaskSpec{
		"task_dind": {Image: "busybox", Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres"},
			{Name: "docker", Image: "docker:dind", Privileged: true, ShareWorkspace: true}}},
		"task_shared": {Image: "busybox", Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "postgres", ShareWorkspace: true}}},
		"task_plain":  {Image: "busybox"},
	}
	for id, spec := range specs {
		if _, err := st.InsertTask(ctx, newTask(id, spec, "me")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	if _, _, err := st.DispatchPass(ctx, 10, func(c store.Claimed) store.Verdict {
		got[c.ID] = c.Need.PrivilegedSidecars
		return store.Verdict{Why: "test"}
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"task_dind": true, "task_shared": false, "task_plain": false}
	if !maps.Equal(got, want) {
		t.Fatalf("offered privileged_sidecars %v, want %v", got, want)
	}
	var stored bool
	if err := rawSQL(t, db).QueryRow(ctx, "select privileged_sidecars from podium.tasks where id = 'task_dind'").Scan(&stored); err != nil || !stored {
		t.Fatalf("task_dind's privileged_sidecars column is %v (%v), want true", stored, err)
	}
}

// A node that comes back reports what it runs. What it reported at the same
// attempt is left alone; an assignment it never received (still scheduled)
// is delivered again; a task that had started and that it no longer has went
// down with its previous life and gets the node-loss policy.
func TestReconcileNodeRedeliversUnreceivedAndLosesUnreported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 1, 3)
	kept, unreceived, gone := tasks[0], tasks[1], tasks[2]
	node := f.onNode[kept]
	for _, id := range []string{kept, gone} {
		out, err := f.st.IngestBatch(ctx, []store.IngestItem{f.item(id, statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING))})
		if err != nil || out[0].Err != nil {
			t.Fatalf("start %s: %v %v", id, err, out)
		}
	}
	pending, err := f.st.PendingCommandsFor(ctx, []string{node})
	if err != nil {
		t.Fatal(err)
	}
	var ds []store.Delivery
	for _, p := range pending {
		ds = append(ds, store.Delivery{ID: p.ID, NodeID: node, Epoch: f.epochs[node]})
	}
	if marked, err := f.st.MarkDeliveredMany(ctx, ds); err != nil || len(marked) != 3 {
		t.Fatalf("marked %d of 3 assigns delivered: %v", len(marked), err)
	}

	lost, err := f.st.ReconcileNode(ctx, node, map[string]int32{kept: 1, "task_unknown": 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lost, []string{gone}) {
		t.Fatalf("lost %v, want only %s (running, not reported)", lost, gone)
	}
	want := map[string]string{kept: store.Running, unreceived: store.Scheduled, gone: store.Lost}
	for id, state := range want {
		task, err := f.st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != state {
			t.Errorf("task %s is %s, want %s", id, task.State, state)
		}
	}
	pending, err = f.st.PendingCommandsFor(ctx, []string{node})
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].Kind != "assign" || pending[0].TaskID != unreceived {
		t.Fatalf("pending commands %+v, want the unreceived task's assign again", pending)
	}
}

// A placement never goes past max_attempts: a queued task that has used
// every attempt its spec allows (a row nothing in Podium writes, but an
// operator's update or an older release could) is failed with the reason,
// not offered to a node as one attempt more.
func TestDispatchPassNeverPlacesPastMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	if _, err := st.InsertTask(ctx, newTask("task_spent", &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2, RetryOnNodeLoss: true}, "me")); err != nil {
		t.Fatal(err)
	}
	if _, err := rawSQL(t, db).Exec(ctx, "update podium.tasks set attempt = 2 where id = 'task_spent'"); err != nil {
		t.Fatal(err)
	}
	offered := 0
	placed, _, err := st.DispatchPass(ctx, 10, func(store.Claimed) store.Verdict {
		offered++
		return store.Verdict{NodeID: "node_a"}
	})
	if err != nil {
		t.Fatal(err)
	}
	if offered != 0 || len(placed) != 0 {
		t.Fatalf("a task that used 2 attempts of 2 was offered %d times and placed %v", offered, placed)
	}
	task, err := st.GetTask(ctx, "task_spent")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != store.Failed || task.Attempt != 2 || task.Reason != "not placed again: all 2 attempts used" {
		t.Fatalf("the task is %s at attempt %d (%q), want failed at attempt 2 saying every attempt is used", task.State, task.Attempt, task.Reason)
	}
}

// Tasks a pass found no node could ever run do not hold up their sharer's
// queue: a pass that skips them (as the dispatcher's passes do between its
// periodic full ones) reaches the tasks behind them, though a whole batch of
// them stands ahead; a full pass looks at them again, in case the fleet can
// run them now.
func TestSkippingUnschedulableReachesTheTasksBehindThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openStore(t)
	var in []store.NewTask
	for i := range 15 {
		in = append(in, newTask(fmt.Sprintf("task_u%02d", i), &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"nowhere"}}, "me"))
	}
	in = append(in, newTask("task_z", &podiumv1.TaskSpec{Image: "busybox"}, "me"))
	if _, err := st.InsertTasks(ctx, in); err != nil {
		t.Fatal(err)
	}
	pass := func(opts store.PassOptions) []string {
		t.Helper()
		var offered []string
		_, _, err := st.DispatchPassWith(ctx, 10, func(c store.Claimed) store.Verdict {
			offered = append(offered, c.ID)
			if len(c.Need.Labels) > 0 {
				return store.Verdict{Why: "cannot run on any node: no node has the label nowhere", Unschedulable: true}
			}
			return store.Verdict{Why: "every node that could run the task is busy: it waits for a free slot"}
		}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return offered
	}
	if got := pass(store.PassOptions{}); len(got) != 10 || slices.Contains(got, "task_z") {
		t.Fatalf("a full pass of 10 offered %v; want the 10 oldest, none of them task_z", got)
	}
	if got := pass(store.PassOptions{SkipUnschedulable: true}); len(got) != 6 || got[5] != "task_z" {
		t.Fatalf("a pass skipping the 10 found unschedulable offered %v; want the 5 not yet looked at, then task_z", got)
	}
	if got := pass(store.PassOptions{SkipUnschedulable: true}); !slices.Equal(got, []string{"task_z"}) {
		t.Fatalf("with all 15 found unschedulable, a skipping pass offered %v; want task_z alone", got)
	}
	if got := pass(store.PassOptions{FIFO: true, SkipUnschedulable: true}); !slices.Equal(got, []string{"task_z"}) {
		t.Fatalf("a skipping pass without fair share offered %v; want task_z alone", got)
	}
	if got := pass(store.PassOptions{}); len(got) != 10 || got[0] != "task_u00" {
		t.Fatalf("a full pass offered %v; want the unschedulable ones looked at again, oldest first", got)
	}
}
