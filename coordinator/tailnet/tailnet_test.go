package tailnet_test

// Acceptance tests of the tailnet transport: a real coordinator replica on a
// real Postgres joins an in-process tailnet with its own tsnet device, and
// tsnet devices with and without tags call it the way agents and people do.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/tailnettest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const nodeTag = "tag:podium-node"

// syncBuffer collects a replica's log for assertions.
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

// env is a tailnet with a coordinator replica on it.
type env struct {
	tn   *tailnettest.Tailnet
	ca   *tailnettest.CA
	r    *coordtest.Replica
	logs *syncBuffer
}

// start runs a replica on a fresh tailnet where every signed-in person is
// an admin (--default-role admin): the tests that use it are about devices
// and nodes, not roles. startWith sets the tailnet options itself.
func start(t *testing.T, allowUntagged bool) *env {
	t.Helper()
	return startWith(t, server.TailnetConfig{AllowUntaggedNodes: allowUntagged, DefaultRole: "admin"})
}

func startWith(t *testing.T, cfg server.TailnetConfig) *env {
	t.Helper()
	tn := tailnettest.New(t)
	ca := tailnettest.NewCA(t)
	db := pgtest.NewDatabase(t)
	logs := &syncBuffer{}
	var w io.Writer = logs
	if os.Getenv("PODIUM_TEST_LOG") != "" {
		w = io.MultiWriter(logs, os.Stderr)
	}
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Transport: server.TransportTailnet,
		Tailnet: server.TailnetConfig{StateDir: t.TempDir(), ControlURL: tn.ControlURL, Ephemeral: true,
			AllowUntaggedNodes: cfg.AllowUntaggedNodes, DefaultRole: cfg.DefaultRole, GetCertificate: ca.GetCertificate},
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	return &env{tn: tn, ca: ca, r: r, logs: logs}
}

// caller is one tailnet device with Podium clients that dial through it.
type caller struct {
	dev   *tailnettest.Device
	tasks podiumv1connect.TaskServiceClient
	admin podiumv1connect.AdminServiceClient
	node  podiumv1connect.NodeServiceClient
}

// join brings up a device that calls the replica over HTTP/2 without TLS,
// on the replica's tailnet address.
func (e *env) join(t *testing.T, hostname string, tags ...string) *caller {
	t.Helper()
	d := e.tn.Join(t, hostname, tags...)
	return newCaller(d, d.HTTPClient(), e.r.URL())
}

// joinTLS brings up a device that calls the replica at the URL it
// advertises: HTTPS with its tailnet name, through MagicDNS.
func (e *env) joinTLS(t *testing.T, hostname string, tags ...string) *caller {
	t.Helper()
	d := e.tn.Join(t, hostname, tags...)
	if !strings.HasPrefix(e.r.Advertise(), "https://podium-coordinator.") {
		t.Fatalf("the replica advertises %s, want its tailnet HTTPS name", e.r.Advertise())
	}
	return newCaller(d, d.HTTPSClient(e.ca), e.r.Advertise())
}

func newCaller(d *tailnettest.Device, hc connect.HTTPClient, url string) *caller {
	return &caller{dev: d, tasks: podiumv1connect.NewTaskServiceClient(hc, url),
		admin: podiumv1connect.NewAdminServiceClient(hc, url), node: podiumv1connect.NewNodeServiceClient(hc, url)}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (c *caller) whoami(t *testing.T) *podiumv1.WhoAmIResponse {
	t.Helper()
	res, err := c.admin.WhoAmI(ctxT(t), connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatalf("WhoAmI from %s: %v", c.dev.Hostname, err)
	}
	return res.Msg
}

func (c *caller) token(t *testing.T) string {
	t.Helper()
	res, err := c.admin.CreateEnrollmentToken(ctxT(t), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatalf("create a token from %s: %v", c.dev.Hostname, err)
	}
	return res.Msg.Token
}

func (c *caller) enroll(ctx context.Context, token string) (*podiumv1.EnrollResponse, error) {
	res, err := c.node.Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: token, Hostname: c.dev.Hostname}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// hello opens a node stream as id with key and returns it with the first
// reply, or the error that ended it.
func (c *caller) hello(ctx context.Context, id, key string) (*connect.BidiStreamForClient[podiumv1.StreamRequest, podiumv1.StreamResponse], error) {
	st := c.node.Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Hostname: c.dev.Hostname, Capacity: &podiumv1.Capacity{MaxTasks: 2}}}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	m, err := st.Receive()
	if err != nil {
		return nil, err
	}
	if m.GetHelloAck() == nil {
		return nil, errors.New("first reply is not a HelloAck")
	}
	return st, nil
}

func wantCode(t *testing.T, what string, err error, code connect.Code, says ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: the error %q does not say %q", what, err, s)
		}
	}
}

// A tagged device enrolls and connects as a node, the coordinator sees it as a
// node, and it receives the task a person submitted from their own untagged
// device, which records the person's login as requested_by.
func TestTaggedNodeRunsAPersonsTask(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	ctx := ctxT(t)
	alice := e.join(t, "alice-laptop")
	worker := e.joinTLS(t, "worker-1", nodeTag) // the node stream needs HTTP/2, here through TLS

	me := alice.whoami(t)
	if me.Kind != podiumv1.CallerKind_CALLER_KIND_PERSON || !strings.HasSuffix(me.Login, "@"+tailnettest.LoginDomain) ||
		!strings.HasPrefix(me.Device, "alice-laptop") || me.Transport != server.TransportTailnet {
		t.Fatalf("alice is seen as %v, want a person with a login on alice-laptop over the tailnet", me)
	}
	enrolled, err := worker.enroll(ctx, alice.token(t))
	if err != nil {
		t.Fatalf("a tagged device's enrollment: %v", err)
	}
	if w := worker.whoami(t); w.Kind != podiumv1.CallerKind_CALLER_KIND_NODE || w.Login != "" ||
		!strings.HasPrefix(w.Device, "worker-1") || len(w.Tags) != 1 || w.Tags[0] != nodeTag {
		t.Fatalf("the worker is seen as %v, want a node tagged %s", w, nodeTag)
	}
	st, err := worker.hello(ctx, enrolled.NodeId, enrolled.NodeKey)
	if err != nil {
		t.Fatalf("the node's stream over the tailnet: %v", err)
	}
	defer st.CloseRequest()

	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{
		Image: "busybox", Command: []string{"true"}}}))
	if err != nil {
		t.Fatalf("alice submits: %v", err)
	}
	if got := sub.Msg.Task.RequestedBy; got != me.Login {
		t.Errorf("the task was requested by %q, want alice's login %q", got, me.Login)
	}
	for {
		m, err := st.Receive()
		if err != nil {
			t.Fatalf("waiting for the assignment: %v", err)
		}
		if a := m.GetAssign(); a != nil {
			if a.TaskId != sub.Msg.Task.Id {
				t.Fatalf("assigned %s, want %s", a.TaskId, sub.Msg.Task.Id)
			}
			break
		}
	}
	got, err := alice.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: sub.Msg.Task.Id}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg.Task.RequestedBy != me.Login || got.Msg.Task.NodeId != enrolled.NodeId {
		t.Errorf("task %v: want requested by %s on %s", got.Msg.Task, me.Login, enrolled.NodeId)
	}
	nodes, err := alice.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil || len(nodes.Msg.Nodes) != 1 {
		t.Fatalf("ListNodes: %v, %v", nodes, err)
	}
	if n := nodes.Msg.Nodes[0]; !strings.HasPrefix(n.TailscaleDevice, "worker-1") || n.TailscaleDeviceId == "" {
		t.Errorf("the node is bound to %q (%q), want worker-1's device", n.TailscaleDevice, n.TailscaleDeviceId)
	}

	// A node may use the node API and WhoAmI, and nothing else.
	_, err = worker.tasks.List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	wantCode(t, "a node listing tasks", err, connect.CodePermissionDenied, "node API")
	_, err = worker.admin.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	wantCode(t, "a node creating tokens", err, connect.CodePermissionDenied)
}

// An untagged device may not enroll, unless the operator allowed it; then it
// may, and the coordinator says so in its log every time.
func TestUntaggedEnrollment(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		e := start(t, false)
		bob := e.join(t, "bob-desktop")
		_, err := bob.enroll(ctxT(t), bob.token(t))
		wantCode(t, "an untagged device's enrollment", err, connect.CodePermissionDenied, nodeTag, "--allow-untagged-nodes")
	})
	t.Run("allowed", func(t *testing.T) {
		e := start(t, true)
		bob := e.join(t, "bob-desktop")
		enrolled, err := bob.enroll(ctxT(t), bob.token(t))
		if err != nil {
			t.Fatalf("with --allow-untagged-nodes: %v", err)
		}
		st, err := bob.hello(ctxT(t), enrolled.NodeId, enrolled.NodeKey)
		if err != nil {
			t.Fatalf("the untagged node's stream: %v", err)
		}
		st.CloseRequest()
		logs := e.logs.String()
		if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "UNTAGGED") || !strings.Contains(logs, enrolled.NodeId) {
			t.Errorf("no warning naming node %s in the log:\n%s", enrolled.NodeId, logs)
		}
	})
}

// A node's key works only from the device it enrolled from. After `podium
// node rekey`, the new device enrolls as the same node and connects, and the
// old key stops working.
func TestNodeKeyIsBoundToItsDevice(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	ctx := ctxT(t)
	op := e.join(t, "operator")
	oldDev := e.join(t, "worker-old", nodeTag)
	newDev := e.join(t, "worker-new", nodeTag)

	first, err := oldDev.enroll(ctx, op.token(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := oldDev.hello(ctx, first.NodeId, first.NodeKey)
	if err != nil {
		t.Fatalf("the node from its own device: %v", err)
	}
	st.CloseRequest()

	_, err = newDev.hello(ctx, first.NodeId, first.NodeKey)
	wantCode(t, "the node's key from another device", err, connect.CodePermissionDenied,
		"podium node rekey "+first.NodeId, "worker-old", "worker-new")

	rk, err := op.admin.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: first.NodeId}))
	if err != nil {
		t.Fatalf("RekeyNode: %v", err)
	}
	again, err := newDev.enroll(ctx, rk.Msg.Token)
	if err != nil {
		t.Fatalf("enrolling the new device with the rekey token: %v", err)
	}
	if again.NodeId != first.NodeId || again.NodeKey == first.NodeKey {
		t.Fatalf("re-enrolled as %s, want the same node %s with a new key", again.NodeId, first.NodeId)
	}
	st, err = newDev.hello(ctx, again.NodeId, again.NodeKey)
	if err != nil {
		t.Fatalf("the node from its new device: %v", err)
	}
	st.CloseRequest()
	_, err = oldDev.hello(ctx, first.NodeId, first.NodeKey)
	wantCode(t, "the old key", err, connect.CodeUnauthenticated)
	_, err = newDev.enroll(ctx, rk.Msg.Token)
	wantCode(t, "the rekey token a second time", err, connect.CodeUnauthenticated, "already used")
}

// A device with some other tag is neither a person nor a node: the admin API
// refuses it and says which tags it has.
func TestOtherTagIsRefused(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	ci := e.join(t, "ci-runner", "tag:ci")
	ctx := ctxT(t)
	_, err := ci.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	wantCode(t, "a tag:ci device listing nodes", err, connect.CodePermissionDenied, "tag:ci", nodeTag)
	_, err = ci.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	wantCode(t, "a tag:ci device submitting", err, connect.CodePermissionDenied, "tag:ci")
	_, err = ci.enroll(ctx, "podium_et_whatever")
	wantCode(t, "a tag:ci device enrolling", err, connect.CodePermissionDenied, "tag:ci")
}
