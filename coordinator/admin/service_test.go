package admin_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/admin"
	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is an admin service on a fresh database, a connection to look at
// the tables with, and one that listens to the doorbells the service rings.
type fixture struct {
	svc    *admin.Service
	db     *pgx.Conn
	listen *pgx.Conn
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	database := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, database.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	svc := admin.NewService(admin.Config{Transport: "local"}, admin.Deps{Store: st, Log: slog.New(slog.DiscardHandler)})
	f := &fixture{svc: svc}
	for _, c := range []**pgx.Conn{&f.db, &f.listen} {
		conn, err := pgx.Connect(ctx, database.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		*c = conn
	}
	for _, ch := range []string{store.ChannelNodeCommands, store.ChannelSubmit, store.ChannelTakeover} {
		if _, err := f.listen.Exec(ctx, "listen "+ch); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// rang checks the next doorbells, in order. Notifications from one session
// arrive in commit order, so a refused call that rang would show up here
// before those of the next call that succeeds.
func (f *fixture) rang(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := f.listen.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for the doorbell %s: %v", w, err)
		}
		if got := n.Channel + " " + n.Payload; got != w {
			t.Fatalf("doorbell %q, want %q", got, w)
		}
	}
}

func code(t *testing.T, err error, want connect.Code, what string) {
	t.Helper()
	if connect.CodeOf(err) != want {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func (f *fixture) addNode(t *testing.T, id, status string, labels ...string) {
	t.Helper()
	if labels == nil {
		labels = []string{}
	}
	f.exec(t, "insert into podium.nodes (id, key_hash, hostname, status, labels, max_tasks) values ($1, '\\x00', 'box', $2, $3, 2)",
		id, status, labels)
}

// An enrollment token is printable, recognisable by its prefix, stored only as
// its hash with its labels, and lives an hour unless asked otherwise. Bad
// input is refused, naming the field, and stores nothing.
func TestCreateEnrollmentToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, bad := range []struct {
		req  *podiumv1.CreateEnrollmentTokenRequest
		says string
	}{
		{&podiumv1.CreateEnrollmentTokenRequest{TtlSeconds: -1}, "ttl_seconds"},
		{&podiumv1.CreateEnrollmentTokenRequest{TtlSeconds: 31 * 24 * 3600}, "ttl_seconds"},
		{&podiumv1.CreateEnrollmentTokenRequest{Labels: []string{"ok", "not ok!"}}, `labels: "not ok!"`},
	} {
		_, err := f.svc.CreateEnrollmentToken(ctx, connect.NewRequest(bad.req))
		code(t, err, connect.CodeInvalidArgument, "CreateEnrollmentToken("+bad.req.String()+")")
		if !strings.Contains(err.Error(), bad.says) {
			t.Errorf("refusal %q does not say %q", err, bad.says)
		}
	}
	if n := f.count(t, "select count(*) from podium.enrollment_tokens"); n != 0 {
		t.Fatalf("refused requests stored %d tokens", n)
	}

	before := time.Now()
	res, err := f.svc.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: []string{"gpu"}}))
	if err != nil {
		t.Fatal(err)
	}
	tok := res.Msg.Token
	if !strings.HasPrefix(tok, enroll.TokenPrefix) || len(tok) < len(enroll.TokenPrefix)+40 {
		t.Fatalf("token %q, want %s and 32 random bytes", tok, enroll.TokenPrefix)
	}
	if exp := res.Msg.ExpiresAt.AsTime(); exp.Before(before.Add(admin.DefaultTokenTTL)) || exp.After(time.Now().Add(admin.DefaultTokenTTL)) {
		t.Fatalf("expires %v, want an hour after it was made (%v)", exp, before)
	}
	var hash []byte
	var labels []string
	if err := f.db.QueryRow(ctx, "select token_hash, labels from podium.enrollment_tokens").Scan(&hash, &labels); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hash, enroll.Hash(tok)) || !slices.Equal(labels, []string{"gpu"}) {
		t.Fatalf("stored hash %x labels %v, want the token's SHA-256 and [gpu]", hash, labels)
	}
	if n := f.count(t, "select count(*) from podium.enrollment_tokens e where to_jsonb(e)::text like '%' || $1 || '%'", tok); n != 0 {
		t.Fatal("the token is stored in clear")
	}
	res, err = f.svc.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{TtlSeconds: 60}))
	if err != nil {
		t.Fatal(err)
	}
	if exp := res.Msg.ExpiresAt.AsTime(); exp.After(time.Now().Add(time.Minute)) {
		t.Fatalf("a 60 s token expires %v", exp)
	}
}

// Drain, slots and labels: bad input is refused and changes nothing; a good
// change is stored on the node's row (the durable half), queued as a config
// command and rung to whichever replica holds the node (the live half), and
// the scheduler is rung to look at the fleet again.
func TestNodeSettings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.addNode(t, "node_a", "online", "linux")

	_, err := f.svc.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{Draining: true}))
	code(t, err, connect.CodeInvalidArgument, "drain with no node id")
	_, err = f.svc.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: "node_nope", Draining: true}))
	code(t, err, connect.CodeNotFound, "drain an unknown node")
	for _, m := range []int32{-1, 10001} {
		_, err = f.svc.SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: "node_a", MaxTasks: m}))
		code(t, err, connect.CodeInvalidArgument, "slots out of range")
	}
	_, err = f.svc.SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: "node_a", Remove: []string{"bad label"}}))
	code(t, err, connect.CodeInvalidArgument, "a bad label")
	_, err = f.svc.SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: "node_a"}))
	code(t, err, connect.CodeInvalidArgument, "labels with nothing to change")
	if n := f.count(t, "select count(*) from podium.node_commands"); n != 0 {
		t.Fatalf("refused changes queued %d commands", n)
	}

	fleet := store.ChannelSubmit + " " + store.PayloadFleet
	commands := store.ChannelNodeCommands + " node_a"
	d, err := f.svc.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: "node_a", Draining: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Msg.Node.Draining || d.Msg.Node.FreeSlots != 0 {
		t.Fatalf("drained node %v, want draining with no free slot", d.Msg.Node)
	}
	f.rang(t, commands, fleet) // nothing before: the refusals rang nothing

	s, err := f.svc.SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: "node_a", MaxTasks: 7}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Msg.Node.Capacity.MaxTasks != 7 {
		t.Fatalf("slots %d, want the override 7", s.Msg.Node.Capacity.MaxTasks)
	}
	f.rang(t, commands, fleet)
	l, err := f.svc.SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: "node_a", Add: []string{"gpu", "ssd"}, Remove: []string{"linux"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Msg.Node.Labels, []string{"gpu", "ssd"}) {
		t.Fatalf("labels %v, want [gpu ssd]", l.Msg.Node.Labels)
	}
	f.rang(t, commands, fleet)
	s, err = f.svc.SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: "node_a", MaxTasks: 0}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Msg.Node.Capacity.MaxTasks != 2 {
		t.Fatalf("slots %d after clearing the override, want the node's own 2", s.Msg.Node.Capacity.MaxTasks)
	}

	var draining bool
	var override int
	var labels []string
	if err := f.db.QueryRow(ctx, "select draining, max_tasks_override, labels from podium.nodes where id = 'node_a'").
		Scan(&draining, &override, &labels); err != nil {
		t.Fatal(err)
	}
	if !draining || override != 0 || !slices.Equal(labels, []string{"gpu", "ssd"}) {
		t.Fatalf("stored draining %v, override %d, labels %v", draining, override, labels)
	}
	if n := f.count(t, "select count(*) from podium.node_commands where node_id = 'node_a' and kind = 'config'"); n != 4 {
		t.Fatalf("%d config commands queued for four changes", n)
	}
}

// A node is removed only when nothing would be stranded: not while it is
// online and undrained, nor while it holds a task. Its session anywhere is
// told to end.
func TestRemoveNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.addNode(t, "node_a", "online")
	f.addNode(t, "node_busy", "offline")
	f.exec(t, "insert into podium.tasks (id, spec, state, node_id) values ('task_1', '{}', 'running', 'node_busy')")

	_, err := f.svc.RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: "node_nope"}))
	code(t, err, connect.CodeNotFound, "remove an unknown node")
	_, err = f.svc.RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: "node_a"}))
	code(t, err, connect.CodeFailedPrecondition, "remove an online undrained node")
	if !strings.Contains(err.Error(), "podium node drain node_a") {
		t.Errorf("refusal %q does not say what to do", err)
	}
	_, err = f.svc.RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: "node_busy"}))
	code(t, err, connect.CodeFailedPrecondition, "remove a node holding a task")

	if _, err := f.svc.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: "node_a", Draining: true})); err != nil {
		t.Fatal(err)
	}
	f.rang(t, store.ChannelNodeCommands+" node_a", store.ChannelSubmit+" "+store.PayloadFleet)
	if _, err := f.svc.RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: "node_a"})); err != nil {
		t.Fatal(err)
	}
	f.rang(t, store.ChannelTakeover+" node_a", store.ChannelSubmit+" "+store.PayloadFleet)
	if n := f.count(t, "select count(*) from podium.nodes where id = 'node_a'"); n != 0 {
		t.Fatal("the removed node is still there")
	}
	if n := f.count(t, "select count(*) from podium.node_commands where node_id = 'node_a'"); n != 0 {
		t.Fatalf("%d commands left behind for the removed node", n)
	}
}

// A rekey token is made only for a node that exists, is stored against that
// node as its hash, and, like an enrollment token, has a bounded life.
func TestRekeyNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.addNode(t, "node_a", "offline")
	_, err := f.svc.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{}))
	code(t, err, connect.CodeInvalidArgument, "rekey with no node id")
	_, err = f.svc.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: "node_a", TtlSeconds: -5}))
	code(t, err, connect.CodeInvalidArgument, "a negative ttl")
	_, err = f.svc.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: "node_a", TtlSeconds: 31 * 24 * 3600}))
	code(t, err, connect.CodeInvalidArgument, "a ttl over 30 days")
	_, err = f.svc.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: "node_nope"}))
	code(t, err, connect.CodeNotFound, "rekey an unknown node")
	if n := f.count(t, "select count(*) from podium.enrollment_tokens"); n != 0 {
		t.Fatalf("refused rekeys stored %d tokens", n)
	}
	res, err := f.svc.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: "node_a"}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.NodeId != "node_a" || !strings.HasPrefix(res.Msg.Token, enroll.TokenPrefix) {
		t.Fatalf("rekey answered %v", res.Msg)
	}
	if n := f.count(t, "select count(*) from podium.enrollment_tokens where rekey_node = 'node_a' and token_hash = $1",
		enroll.Hash(res.Msg.Token)); n != 1 {
		t.Fatal("the rekey token is not stored against its node")
	}
}

// ListNodes reports each node's stored health, the replica holding it, its
// free slots and its tailnet device, to an admin; a member sees the same
// fleet without the tailnet device, the replica or who set a label.
func TestListNodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := tailnet.WithCaller(context.Background(), tailnet.Caller{Kind: tailnet.KindToken, Role: "admin"})
	f.addNode(t, "node_on", "online", "linux")
	f.addNode(t, "node_un", "unreachable")
	f.addNode(t, "node_off", "offline")
	f.exec(t, `update podium.nodes set session_replica = 'replica_1', last_heartbeat_at = now(),
		tailscale_device_id = 'dev1', tailscale_device = 'box.tailnet' where id = 'node_on'`)
	f.exec(t, "insert into podium.tasks (id, spec, state, node_id) values ('task_1', '{}', 'running', 'node_on')")

	res, err := f.svc.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*podiumv1.Node{}
	for _, n := range res.Msg.Nodes {
		got[n.Id] = n
	}
	if len(got) != 3 {
		t.Fatalf("listed %d nodes, want 3", len(res.Msg.Nodes))
	}
	on := got["node_on"]
	if on.Status != podiumv1.NodeStatus_NODE_STATUS_ONLINE || on.Replica != "replica_1" || on.LastHeartbeatAt == nil ||
		on.RunningTasks != 1 || on.FreeSlots != 1 || on.TailscaleDeviceId != "dev1" || on.TailscaleDevice != "box.tailnet" ||
		!slices.Equal(on.Labels, []string{"linux"}) {
		t.Errorf("online node: %v", on)
	}
	f.exec(t, "update podium.nodes set label_sources = '{\"linux\": {\"source\": \"admin\", \"set_by\": \"ann\"}}' where id = 'node_on'")
	member := tailnet.WithCaller(context.Background(), tailnet.Caller{Kind: tailnet.KindPerson, Login: "bob@example.com", Role: "member"})
	if res, err := f.svc.ListNodes(member, connect.NewRequest(&podiumv1.ListNodesRequest{})); err != nil || len(res.Msg.Nodes) != 3 {
		t.Errorf("a member's ListNodes: %v, %v; want the 3 nodes", res, err)
	} else {
		for _, n := range res.Msg.Nodes {
			if n.Id != "node_on" {
				continue
			}
			if n.Status != podiumv1.NodeStatus_NODE_STATUS_ONLINE || n.FreeSlots != 1 || !slices.Equal(n.Labels, []string{"linux"}) ||
				n.TailscaleDeviceId != "" || n.TailscaleDevice != "" || n.Replica != "" {
				t.Errorf("a member sees node_on as %v: want its status, slots and labels, no tailnet device or replica", n)
			}
			for _, l := range n.LabelSources {
				if l.SetBy != "" {
					t.Errorf("a member sees who set label %s: %q", l.Label, l.SetBy)
				}
			}
		}
	}
	if got["node_un"].Status != podiumv1.NodeStatus_NODE_STATUS_UNREACHABLE {
		t.Errorf("unreachable node: %v", got["node_un"])
	}
	if off := got["node_off"]; off.Status != podiumv1.NodeStatus_NODE_STATUS_OFFLINE || off.Replica != "" ||
		off.LastHeartbeatAt != nil || off.TailscaleDeviceId != "" {
		t.Errorf("offline node: %v", off)
	}
}

// WhoAmI answers with the caller the coordinator identified, and the
// transport; a call nobody identified is a bug, said as one.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := f.svc.WhoAmI(context.Background(), connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	code(t, err, connect.CodeInternal, "WhoAmI with no identified caller")
	for _, tc := range []struct {
		caller tailnet.Caller
		kind   podiumv1.CallerKind
	}{
		{tailnet.Caller{Kind: tailnet.KindToken}, podiumv1.CallerKind_CALLER_KIND_TOKEN},
		{tailnet.Caller{Kind: tailnet.KindPerson, Login: "ann@example.com", Device: "laptop", DeviceID: "d1"}, podiumv1.CallerKind_CALLER_KIND_PERSON},
		{tailnet.Caller{Kind: tailnet.KindNode, Device: "runner-1", DeviceID: "d2", Tags: []string{"tag:podium-node"}}, podiumv1.CallerKind_CALLER_KIND_NODE},
	} {
		res, err := f.svc.WhoAmI(tailnet.WithCaller(context.Background(), tc.caller), connect.NewRequest(&podiumv1.WhoAmIRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		m := res.Msg
		if m.Kind != tc.kind || m.Login != tc.caller.Login || m.Device != tc.caller.Device || m.DeviceId != tc.caller.DeviceID ||
			!slices.Equal(m.Tags, tc.caller.Tags) || m.Transport != "local" {
			t.Errorf("WhoAmI for %+v: %v", tc.caller, m)
		}
	}
}
