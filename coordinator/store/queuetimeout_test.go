package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fleetPass runs one dispatch pass as the dispatcher does, on the fleet
// with its absent nodes (store.Fleet).
func fleetPass(t *testing.T, st *store.Store) ([]store.Placement, int) {
	t.Helper()
	ctx := context.Background()
	nodes, err := st.Fleet(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	placed, waiting, err := st.DispatchPass(ctx, 100, dispatch.PlaceOn(dispatch.Fleet(nodes), time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return placed, waiting
}

// notes are the texts of a task's notes, in its log's order.
func notes(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	evs, err := st.ReadEvents(context.Background(), id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if n := ev.Event.GetNote(); n != nil {
			out = append(out, n.GetText())
		}
	}
	return out
}

// A pass records a task no node could ever run as unschedulable, with its
// reason and one note in its log, however many passes find it so; a task
// that waits for room is not; a placement clears the flag.
func TestDispatchPassRecordsUnschedulable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 4, CPUCores: 8, MemoryMB: 23456}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertTasks(ctx, []store.NewTask{
		newTask("task_huge", &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{MemoryMb: 900000}}, "alice"),
		newTask("task_fills", &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{MemoryMb: 20000}}, "alice"),
		newTask("task_room", &podiumv1.TaskSpec{Image: "busybox", Resources: &podiumv1.Resources{MemoryMb: 20000}}, "alice"),
	}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		fleetPass(t, st)
	}
	huge, err := st.GetTask(ctx, "task_huge")
	if err != nil {
		t.Fatal(err)
	}
	const why = "cannot run on any node: it asks 900,000 MiB of memory (its sidecars' included) and the largest node has 23,456 MiB"
	if huge.State != store.Queued || !huge.Unschedulable || !strings.HasPrefix(huge.Reason, why) || !huge.Proto().GetUnschedulable() {
		t.Fatalf("task_huge: %s, unschedulable %v, %q; want queued, unschedulable, %q…", huge.State, huge.Unschedulable, huge.Reason, why)
	}
	if got := notes(t, st, "task_huge"); len(got) != 1 || got[0] != store.UnschedulableNote+huge.Reason {
		t.Fatalf("task_huge's notes after three passes: %q, want one saying %q", got, store.UnschedulableNote+huge.Reason)
	}
	room, err := st.GetTask(ctx, "task_room")
	if err != nil {
		t.Fatal(err)
	}
	if room.State != store.Queued || room.Unschedulable || !strings.HasPrefix(room.Reason, "waiting: no node has 20000 MiB free now") ||
		len(notes(t, st, "task_room")) != 0 {
		t.Fatalf("task_room: %s, unschedulable %v, %q, notes %q; want waiting for room, without a note",
			room.State, room.Unschedulable, room.Reason, notes(t, st, "task_room"))
	}

	// A bigger machine takes the node's place: the task runs.
	if _, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 4, CPUCores: 8, MemoryMB: 1 << 21}); err != nil {
		t.Fatal(err)
	}
	placed, _ := fleetPass(t, st)
	if len(placed) == 0 {
		t.Fatal("nothing placed on the bigger node")
	}
	if huge, err = st.GetTask(ctx, "task_huge"); err != nil || huge.State != store.Scheduled || huge.Unschedulable || huge.Proto().GetUnschedulable() {
		t.Fatalf("task_huge on the bigger node: %s, unschedulable %v (%v); want scheduled, no longer unschedulable", huge.State, huge.Unschedulable, err)
	}
}

// Fleet is the connected nodes, then those that are not connected now but
// connected once (absent), as they last reported themselves; a node that
// never connected is in neither.
func TestFleetReadsAbsentNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	for _, id := range []string{"node_live", "node_gone", "node_never", "node_silent"} {
		if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ($1, '\\x00')", id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"node_live", "node_gone", "node_silent"} {
		if _, err := st.StartSession(ctx, store.SessionStart{NodeID: id, Replica: "r1", MaxTasks: 2, MemoryMB: 4096,
			Limits: store.NodeLimits{MaxMemoryMB: 2048}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sql.Exec(ctx, `update podium.nodes set session_replica = null, status = 'offline' where id = 'node_gone'`); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, "update podium.nodes set last_heartbeat_at = now() - interval '65 minutes' where id = 'node_silent'"); err != nil {
		t.Fatal(err)
	}
	fleet, err := st.Fleet(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range fleet {
		got = append(got, c.ID)
		if c.Absent != (c.ID != "node_live") {
			t.Errorf("%s: absent %v", c.ID, c.Absent)
		}
		if c.MemoryMB != 4096 || c.Limits.MaxMemoryMB != 2048 {
			t.Errorf("%s: %d MiB, limit %d, want as it reported", c.ID, c.MemoryMB, c.Limits.MaxMemoryMB)
		}
	}
	if strings.Join(got, " ") != "node_live node_gone node_silent" {
		t.Fatalf("Fleet = %v, want node_live, then the absent node_gone and node_silent", got)
	}
	if conn, err := st.Candidates(ctx, 30*time.Second); err != nil || len(conn) != 1 || conn[0].ID != "node_live" {
		t.Fatalf("Candidates = %+v (%v), want node_live alone", conn, err)
	}
}

// A queued task's queue deadline runs from its submit, and from each move
// back to the queue (a retry's from the end of its backoff); past it, the
// leader's sweep fails the task saying how long it waited, whose timeout
// it was and its last reason. A task without a queue timeout never expires.
func TestExpireQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	own := newTask("task_own", &podiumv1.TaskSpec{Image: "busybox", QueueTimeoutSeconds: 600}, "alice")
	coord := newTask("task_coord", &podiumv1.TaskSpec{Image: "busybox"}, "alice")
	coord.QueueTimeoutSeconds = 60 // the coordinator's --queue-timeout, applied at submit
	never := newTask("task_never", &podiumv1.TaskSpec{Image: "busybox"}, "alice")
	before := time.Now()
	ts, err := st.InsertTasks(ctx, []store.NewTask{own, coord, never})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		var want time.Duration
		switch tk.ID {
		case "task_own":
			want = 10 * time.Minute
		case "task_coord":
			want = time.Minute
		}
		p := tk.Proto()
		switch {
		case want == 0 && (tk.QueueDeadline != nil || p.GetQueueTimeoutSeconds() != 0):
			t.Errorf("%s has a queue deadline %v", tk.ID, tk.QueueDeadline)
		case want != 0 && (tk.QueueDeadline == nil || tk.QueueDeadline.Before(before.Add(want-time.Minute)) ||
			tk.QueueDeadline.After(time.Now().Add(want+time.Minute)) || p.GetQueueTimeoutSeconds() != int64(want/time.Second) ||
			!p.GetQueueDeadline().AsTime().Equal(*tk.QueueDeadline)):
			t.Errorf("%s: queue deadline %v, timeout %d s, want about %s from now", tk.ID, tk.QueueDeadline, p.GetQueueTimeoutSeconds(), want)
		}
	}
	if out, err := st.ExpireQueued(ctx); err != nil || len(out) != 0 {
		t.Fatalf("ExpireQueued before any deadline: %v, %v; want nothing", out, err)
	}
	// Their time is up: a pass saw task_own unschedulable, task_coord not
	// yet looked at.
	if _, err := sql.Exec(ctx, `update podium.tasks set queue_deadline = now() - interval '1 second',
		reason = case when id = 'task_own' then 'cannot run on any node: no node has every label the task needs (gpu)' else '' end,
		created_at = now() - interval '2 hours' where id in ('task_own', 'task_coord')`); err != nil {
		t.Fatal(err)
	}
	out, err := st.ExpireQueued(ctx)
	if err != nil || len(out) != 2 {
		t.Fatalf("ExpireQueued = %v, %v; want task_own and task_coord", out, err)
	}
	for id, want := range map[string]string{
		"task_own":   "waited 10m0s in the queue without a node (queue_timeout); the last reason: cannot run on any node: no node has every label the task needs (gpu)",
		"task_coord": "waited 1m0s in the queue without a node (the coordinator's --queue-timeout); the last reason: none yet",
	} {
		tk, err := st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != store.Failed || !strings.HasPrefix(tk.Reason, want) || tk.ExitCode != nil || tk.QueueDeadline != nil {
			t.Errorf("%s: %s, %q, exit %v, deadline %v; want failed, %q…, no exit code", id, tk.State, tk.Reason, tk.ExitCode, tk.QueueDeadline, want)
		}
		evs, err := st.ReadEvents(ctx, id, 0, 10)
		if err != nil || len(evs) == 0 || evs[len(evs)-1].Event.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_FAILED ||
			evs[len(evs)-1].Event.GetStatus().GetReason() != tk.Reason {
			t.Errorf("%s's log ends with %v (%v), want its failure", id, evs, err)
		}
	}
	if tk, err := st.GetTask(ctx, "task_never"); err != nil || tk.State != store.Queued {
		t.Fatalf("task_never, without a queue timeout: %s (%v), want still queued", tk.State, err)
	}

	// A requeue starts the wait again; a retry's, after its backoff.
	requeued := newTask("task_requeued", &podiumv1.TaskSpec{Image: "busybox", QueueTimeoutSeconds: 600}, "alice")
	if _, err := st.InsertTasks(ctx, []store.NewTask{requeued}); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `update podium.tasks set state = 'running', attempt = 1, queue_deadline = null where id = 'task_requeued'`); err != nil {
		t.Fatal(err)
	}
	if moved, err := st.Transition(ctx, store.Transition{TaskID: "task_requeued", From: []string{store.Running}, To: store.Queued,
		RetryAfter: time.Hour}); err != nil || !moved {
		t.Fatalf("requeue: %v, %v", moved, err)
	}
	tk, err := st.GetTask(ctx, "task_requeued")
	if err != nil || tk.QueueDeadline == nil || tk.QueueDeadline.Before(time.Now().Add(70*time.Minute-time.Minute)) ||
		tk.QueueDeadline.After(time.Now().Add(70*time.Minute+time.Minute)) {
		t.Fatalf("a retry's requeue: deadline %v (%v), want its backoff (1h) and queue timeout (10m) from now", tk.QueueDeadline, err)
	}
	if moved, err := st.Transition(ctx, store.Transition{TaskID: "task_requeued", From: []string{store.Queued}, To: store.Cancelled}); err != nil || !moved {
		t.Fatalf("cancel: %v, %v", moved, err)
	}
	var left int
	if err := sql.QueryRow(ctx, "select count(*) from podium.tasks where queue_deadline is not null").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d tasks keep a queue deadline (%v), want none: every one that had one has left the queue", left, err)
	}
}
