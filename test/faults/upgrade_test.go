package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// oldSchema is the last migration of an early release, thirty migrations
// back: the schema TestUpgradeFromOldSchema writes rows into by hand.
const oldSchema = "0006_node_limits"

// oldEvent is a row of podium.task_events as that release wrote it.
type oldEvent struct {
	attempt int32
	nodeSeq int64 // 0: none (an event the control plane wrote itself)
	kind    string
	offset  int64
	data    string
	state   string
	reason  string
	exit    *int32
	text    string
}

// oldAttempt is a row of podium.attempts.
type oldAttempt struct {
	n        int32
	acked    int64
	finished bool
}

// oldTask is a row of podium.tasks with its attempts and log.
type oldTask struct {
	id       string
	spec     *podiumv1.TaskSpec
	state    string
	reason   string
	exit     *int32
	node     string // "": none
	attempt  int32
	cancel   string // cancel_reason, "" if no cancel was asked
	events   []oldEvent
	attempts []oldAttempt
}

func code(c int32) *int32 { return &c }

func stdout(attempt int32, nodeSeq, offset int64, data string) oldEvent {
	return oldEvent{attempt: attempt, nodeSeq: nodeSeq, kind: "stdout", offset: offset, data: data}
}

func stderr(attempt int32, nodeSeq, offset int64, data string) oldEvent {
	return oldEvent{attempt: attempt, nodeSeq: nodeSeq, kind: "stderr", offset: offset, data: data}
}

func status(attempt int32, nodeSeq int64, state, reason string, exit *int32) oldEvent {
	return oldEvent{attempt: attempt, nodeSeq: nodeSeq, kind: "status", state: state, reason: reason, exit: exit}
}

func note(attempt int32, text string) oldEvent {
	return oldEvent{attempt: attempt, kind: "note", text: text}
}

// insertOld writes the task as that release's store did: the task
// row (spec as protobuf JSON, the placement columns 0006 added), its
// attempts and its log, with last_seq at its newest event.
func insertOld(ctx context.Context, t *testing.T, c *pgx.Conn, o oldTask) {
	t.Helper()
	spec, err := protojson.Marshal(o.spec)
	if err != nil {
		t.Fatal(err)
	}
	var node *string
	if o.node != "" {
		node = &o.node
	}
	var cancelReason *string
	if o.cancel != "" {
		cancelReason = &o.cancel
	}
	terminal := map[string]bool{"succeeded": true, "failed": true, "cancelled": true, "lost": true}[o.state]
	started := o.state == "running" || terminal && o.attempt > 0
	_, err = c.Exec(ctx, `insert into podium.tasks (id, spec, state, reason, exit_code, node_id, attempt, priority, labels,
			max_attempts, retry_on_node_loss, requested_by, created_at, scheduled_at, started_at, finished_at,
			cancel_requested_at, cancel_reason, last_seq, timeout_seconds)
		values ($1, $2, $3, $4, $5, $6, $7, $8, '{}', $9, $10, 'token', now() - interval '2 hours',
			case when $7 > 0 then now() - interval '90 minutes' end,
			case when $11 then now() - interval '80 minutes' end,
			case when $12 then now() - interval '70 minutes' end,
			case when $13::text is not null then now() - interval '75 minutes' end, $13, $14, $15)`,
		o.id, string(spec), o.state, o.reason, o.exit, node, o.attempt, o.spec.GetPriority(),
		max(o.spec.GetMaxAttempts(), 1), o.spec.GetRetryOnNodeLoss(), started, terminal, cancelReason, len(o.events), o.spec.GetTimeoutSeconds())
	if err != nil {
		t.Fatalf("insert task %s: %v", o.id, err)
	}
	for _, a := range o.attempts {
		_, err := c.Exec(ctx, `insert into podium.attempts (task_id, attempt, node_id, acked_seq, assigned_at, finished_at)
			values ($1, $2::bigint, $3, $4, now() - interval '90 minutes', case when $5 then now() - interval '70 minutes' end)`,
			o.id, a.n, oldNode, a.acked, a.finished)
		if err != nil {
			t.Fatalf("insert attempt %d of %s: %v", a.n, o.id, err)
		}
	}
	for i, e := range o.events {
		var nodeSeq, offset *int64
		if e.nodeSeq > 0 {
			nodeSeq = &e.nodeSeq
		}
		var data []byte
		var state, reason, text *string
		switch e.kind {
		case "stdout", "stderr":
			offset, data = &e.offset, []byte(e.data)
		case "status":
			state, reason = &e.state, &e.reason
		case "note":
			text = &e.text
		}
		_, err := c.Exec(ctx, `insert into podium.task_events (task_id, seq, attempt, node_seq, at, kind, log_offset, data, state, reason, exit_code, text)
			values ($1, $2, $3, $4, now() - interval '85 minutes' + make_interval(secs => $12), $5, $6, $7, $8, $9, $10, $11)`,
			o.id, int64(i+1), e.attempt, nodeSeq, e.kind, offset, data, state, reason, e.exit, text, float64(i+1))
		if err != nil {
			t.Fatalf("insert event %d of %s: %v", i+1, o.id, err)
		}
	}
}

// oldNode is the node that release's tasks ran on. Its machine is
// gone: no agent will ever connect as it again.
const oldNode = "node_01J0000000000000000000GONE"

// eventLine is an event as this test compares it: everything a reader sees
// but the time.
func eventLine(ev *podiumv1.TaskEvent) string {
	switch {
	case ev.GetLog() != nil:
		return fmt.Sprintf("a%d n%d %s @%d %q", ev.GetAttempt(), ev.GetSeq(), ev.GetLog().GetStream(), ev.GetLog().GetOffset(), ev.GetLog().GetData())
	case ev.GetStatus() != nil:
		s := ev.GetStatus()
		exit := "-"
		if s.ExitCode != nil {
			exit = fmt.Sprint(s.GetExitCode())
		}
		return fmt.Sprintf("a%d n%d status %s %q exit %s", ev.GetAttempt(), ev.GetSeq(), s.GetState(), s.GetReason(), exit)
	default:
		return fmt.Sprintf("a%d n%d note %q", ev.GetAttempt(), ev.GetSeq(), ev.GetNote().GetText())
	}
}

// oldLine is eventLine of an event as it was inserted.
func oldLine(e oldEvent) string {
	switch e.kind {
	case "stdout", "stderr":
		stream := podiumv1.LogStream_LOG_STREAM_STDOUT
		if e.kind == "stderr" {
			stream = podiumv1.LogStream_LOG_STREAM_STDERR
		}
		return fmt.Sprintf("a%d n%d %s @%d %q", e.attempt, e.nodeSeq, stream, e.offset, e.data)
	case "status":
		exit := "-"
		if e.exit != nil {
			exit = fmt.Sprint(*e.exit)
		}
		return fmt.Sprintf("a%d n%d status %s %q exit %s", e.attempt, e.nodeSeq, podiumv1.TaskState(podiumv1.TaskState_value["TASK_STATE_"+strings.ToUpper(e.state)]), e.reason, exit)
	default:
		return fmt.Sprintf("a%d n%d note %q", e.attempt, e.nodeSeq, e.text)
	}
}

// storedEvents is every event of the task the replica returns, not following.
func storedEvents(t testing.TB, r *Replica, id string) []string {
	t.Helper()
	stream, err := r.Tasks().Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	defer stream.Close()
	var out []string
	for stream.Receive() {
		if ev := stream.Msg().GetEvent(); ev != nil {
			out = append(out, eventLine(ev))
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	return out
}

// TestUpgradeFromOldSchema starts today's coordinator and a real agent on a
// database an early release's schema (through 0006) holds, with
// tasks in every state that release could leave: waiting, assigned to,
// starting on and running on a node whose machine is gone (the control
// plane was stopped and the node never came back), and finished in each way,
// with their attempts and logs. Today's coordinator migrates it at start.
// Then:
//   - every task the old release finished reads back through the API as it
//     was stored: state, reason, exit code, attempt, node, and its whole log
//     event by event;
//   - the queued tasks run on the new agent to their own end, their new
//     output after what the old log held;
//   - the tasks held by the gone node are settled by the node-loss policy
//     once it is declared offline: lost without retry_on_node_loss, run
//     again (attempt 2 of 2) with it; the one only assigned is taken back at
//     the ack deadline and run again;
//
// and nothing is left in Docker.
//
// TestRollingUpgrade runs the previous release's own binaries and rolls them
// to today's; this row keeps what that one cannot reach: rows from a release
// thirty migrations back, every migration since applied over them at once,
// and tasks left held by a node whose machine never comes back.
func TestUpgradeFromOldSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	db := pgtest.NewDatabaseIn(t, pg)
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateThrough(ctx, c, oldSchema); err != nil {
		t.Fatalf("migrate through %s: %v", oldSchema, err)
	}
	// The gone node, as a control plane stopped while it was online left it.
	if _, err := c.Exec(ctx, `insert into podium.nodes (id, key_hash, hostname, agent_version, status, max_tasks,
			last_heartbeat_at, session_replica, session_epoch, session_started_at, last_assigned_at, enrolled_at)
		values ($1, sha256('old key'), 'old-machine', 'v0.6.0', 'online', 4, now() - interval '65 minutes',
			'replica_01J00000000000000000000OLD', 7, now() - interval '100 minutes', now() - interval '90 minutes', now() - interval '1 day')`, oldNode); err != nil {
		t.Fatal(err)
	}

	image := dockertest.EnsureImage(t)
	runs := func(name string, exit int) *podiumv1.TaskSpec {
		return &podiumv1.TaskSpec{Image: image, Command: []string{"sh", "-c",
			fmt.Sprintf(`echo "%[1]s: one"; echo "%[1]s: two" >&2; echo "%[1]s: three"; exit %[2]d`, name, exit)}}
	}
	// What a spec from runs prints on stdout and stderr.
	printed := func(name string) (string, string) { return name + ": one\n" + name + ": three\n", name + ": two\n" }
	retried := func(s *podiumv1.TaskSpec) *podiumv1.TaskSpec {
		s.MaxAttempts, s.RetryOnNodeLoss = 2, true
		return s
	}
	id := func(n int) string { return fmt.Sprintf("task_01J00000000000000000000%03d", n) }
	assigned := status(1, 0, "scheduled", "", nil)
	lostWhy := "node " + oldNode + " went offline (no heartbeat)"
	old := []oldTask{
		{id: id(1), spec: runs("queued", 0), state: "queued", reason: "waiting for a free slot"},
		// Lost with a node once already, and requeued for its second attempt.
		{id: id(2), spec: retried(runs("requeued", 5)), state: "queued", attempt: 1, reason: lostWhy + "; requeued",
			attempts: []oldAttempt{{1, 3, true}},
			events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil),
				stdout(1, 3, 0, "attempt 1 printed this\n"), note(1, "node lost: "+lostWhy+"; requeued for attempt 2 of 2")}},
		{id: id(3), spec: retried(runs("assigned", 0)), state: "scheduled", node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 0, false}}, events: []oldEvent{assigned}},
		{id: id(4), spec: runs("provisioning", 0), state: "provisioning", node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 1, false}}, events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil)}},
		{id: id(5), spec: retried(runs("running", 0)), state: "running", node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 3, false}},
			events:   []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil), stdout(1, 3, 0, "attempt 1 was here\n")}},
		{id: id(6), spec: runs("running-lost", 0), state: "running", node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 3, false}},
			events:   []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil), stderr(1, 3, 0, "half a line")}},
		{id: id(7), spec: runs("succeeded", 0), state: "succeeded", reason: "", exit: code(0), node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 6, true}},
			events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil),
				stdout(1, 3, 0, "succeeded: one\n"), stderr(1, 4, 0, "succeeded: two\n"), stdout(1, 5, 15, "succeeded: three\n"),
				status(1, 6, "succeeded", "", code(0))}},
		{id: id(8), spec: runs("failed", 2), state: "failed", reason: "exit code 2", exit: code(2), node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 4, true}},
			events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil),
				stderr(1, 3, 0, "failed: two\n"), status(1, 4, "failed", "exit code 2", code(2))}},
		{id: id(9), spec: runs("cancelled", 0), state: "cancelled", reason: "cancelled by token", exit: code(143), node: oldNode, attempt: 1,
			cancel: "cancelled by token", attempts: []oldAttempt{{1, 4, true}},
			events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil),
				note(1, "cancel requested: cancelled by token"), status(1, 3, "cancelled", "cancelled by token", code(143))}},
		{id: id(10), spec: runs("lost", 0), state: "lost", reason: lostWhy, node: oldNode, attempt: 1,
			attempts: []oldAttempt{{1, 2, true}},
			events: []oldEvent{assigned, status(1, 1, "provisioning", "", nil), status(1, 2, "running", "", nil),
				note(1, "node lost: "+lostWhy), status(1, 0, "lost", lostWhy, nil)}},
		{id: id(11), spec: runs("cancelled-queued", 0), state: "cancelled", reason: "cancelled by token while queued",
			events: []oldEvent{status(0, 0, "cancelled", "cancelled by token while queued", nil)}},
	}
	for _, o := range old {
		insertOld(ctx, t, c, o)
	}

	// Today's coordinator migrates the database at start. Short thresholds
	// so that the gone node is declared offline within seconds.
	r := StartReplica(t, db.URL, "--heartbeat-interval", "1s", "--unreachable-after", "5s", "--offline-after", "10s")
	var applied []string
	rows, err := c.Query(ctx, "select version from podium.schema_migrations order by version")
	if err == nil {
		applied, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatalf("read the applied migrations: %v", err)
	}
	if len(applied) == 0 || applied[len(applied)-1] <= oldSchema {
		t.Fatalf("today's coordinator applied nothing after %s: %v", oldSchema, applied)
	}

	// Finished tasks read back exactly as stored, before anything runs.
	for _, o := range old[6:] {
		checkOld(t, r, o)
	}

	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)
	r.WaitNode(t, oldNode, podiumv1.NodeStatus_NODE_STATUS_OFFLINE)

	// Wait for every task to end.
	const settleWithin = 5 * time.Minute
	wait.For(t, settleWithin, "every task of the old release to end", func() bool {
		for _, o := range old {
			if s := r.Task(t, o.id).State; s < podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				return false
			}
		}
		return true
	})

	for _, o := range old {
		tk := r.Task(t, o.id)
		t.Logf("%s: %s before the upgrade; now %s (%q), attempt %d on %q; its log after the old one: %q",
			o.id, o.state, tk.State, tk.Reason, tk.Attempt, tk.NodeId, storedEvents(t, r, o.id)[len(o.events):])
	}
	// The finished ones are untouched.
	for _, o := range old[6:] {
		checkOld(t, r, o)
	}
	// The queued and the requeued ran on the new agent, to their own end,
	// after what the old log held.
	ranAgain := []struct {
		o       oldTask
		name    string
		exit    int32
		attempt int32
	}{
		{old[0], "queued", 0, 1},
		{old[1], "requeued", 5, 2},
		{old[2], "assigned", 0, 2},
		{old[4], "running", 0, 2},
	}
	for _, w := range ranAgain {
		tk := r.Task(t, w.o.id)
		state := podiumv1.TaskState_TASK_STATE_SUCCEEDED
		if w.exit != 0 {
			state = podiumv1.TaskState_TASK_STATE_FAILED
		}
		if tk.State != state || tk.GetExitCode() != w.exit || tk.Attempt != w.attempt || tk.NodeId != a.Node {
			t.Errorf("task %s (%s, %s before the upgrade): %s (%q) exit %v attempt %d on %q; want %s exit %d as attempt %d on the new node %s",
				w.o.id, w.name, w.o.state, tk.State, tk.Reason, tk.ExitCode, tk.Attempt, tk.NodeId, state, w.exit, w.attempt, a.Node)
		}
		var oldOut, oldErr string
		for _, e := range w.o.events {
			switch e.kind {
			case "stdout":
				oldOut += e.data
			case "stderr":
				oldErr += e.data
			}
		}
		out, errs := r.StoredOutput(t, w.o.id)
		wantOut, wantErr := printed(w.name)
		if string(out) != oldOut+wantOut || string(errs) != oldErr+wantErr {
			t.Errorf("task %s (%s) stored stdout %q and stderr %q; want %q and %q (the old attempt's, then the new one's)",
				w.o.id, w.name, out, errs, oldOut+wantOut, oldErr+wantErr)
		}
		// The old log is still there, first, as it was.
		events := storedEvents(t, r, w.o.id)
		for i, e := range w.o.events {
			if i >= len(events) || events[i] != oldLine(e) {
				t.Errorf("task %s event %d reads %q, want the stored %q", w.o.id, i+1, at(events, i), oldLine(e))
			}
		}
	}
	// The ones held by the gone node without retry_on_node_loss are lost,
	// saying why, their old log kept.
	for _, o := range []oldTask{old[3], old[5]} {
		tk := r.Task(t, o.id)
		if tk.State != podiumv1.TaskState_TASK_STATE_LOST || !strings.Contains(tk.Reason, oldNode+" went offline") || tk.Attempt != 1 || tk.NodeId != oldNode {
			t.Errorf("task %s (%s on the gone node before the upgrade): %s (%q) attempt %d on %q; want lost saying %s went offline, attempt 1 on it",
				o.id, o.state, tk.State, tk.Reason, tk.Attempt, tk.NodeId, oldNode)
		}
		events := storedEvents(t, r, o.id)
		for i, e := range o.events {
			if i >= len(events) || events[i] != oldLine(e) {
				t.Errorf("task %s event %d reads %q, want the stored %q", o.id, i+1, at(events, i), oldLine(e))
			}
		}
		if last := at(events, len(events)-1); !strings.Contains(last, "status TASK_STATE_LOST") {
			t.Errorf("task %s's log ends %q, want its lost status", o.id, last)
		}
	}
	NothingLeft(t, a.Node)
}

// at is s[i], or "(nothing)" past its end.
func at(s []string, i int) string {
	if i < 0 || i >= len(s) {
		return "(nothing)"
	}
	return s[i]
}

// checkOld checks that a task the old release finished reads back
// through the API exactly as it was stored.
func checkOld(t *testing.T, r *Replica, o oldTask) {
	t.Helper()
	tk := r.Task(t, o.id)
	state := podiumv1.TaskState(podiumv1.TaskState_value["TASK_STATE_"+strings.ToUpper(o.state)])
	exitOK := (o.exit == nil) == (tk.ExitCode == nil) && (o.exit == nil || *o.exit == tk.GetExitCode())
	if tk.State != state || tk.Reason != o.reason || !exitOK || tk.Attempt != o.attempt || tk.NodeId != o.node ||
		tk.GetSpec().GetCommand()[2] != o.spec.GetCommand()[2] || tk.LastSeq != uint64(len(o.events)) {
		t.Errorf("task %s reads %s (%q) exit %v attempt %d node %q last_seq %d; stored %s (%q) exit %v attempt %d node %q last_seq %d",
			o.id, tk.State, tk.Reason, tk.ExitCode, tk.Attempt, tk.NodeId, tk.LastSeq, state, o.reason, o.exit, o.attempt, o.node, len(o.events))
	}
	got := storedEvents(t, r, o.id)
	want := make([]string, len(o.events))
	for i, e := range o.events {
		want[i] = oldLine(e)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("task %s's log reads:\n%s\nstored:\n%s", o.id, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
