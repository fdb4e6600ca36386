package tailnet_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"connectrpc.com/connect"
	"tailscale.com/tailcfg"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/tailnet"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// On the tailnet a person's role comes from the tailnet policy's grant or a
// user row with their login; with neither (and no default role) they are
// refused with both ways named, though WhoAmI still tells them who they are.
// A grant in the policy takes effect without a restart.
func TestTailnetPersonRoles(t *testing.T) {
	t.Parallel()
	e := startWith(t, server.TailnetConfig{})
	carol := e.join(t, "carol-laptop")
	who := carol.whoami(t)
	if who.Role != "" || who.Login == "" {
		t.Fatalf("WhoAmI of a person without a role = %v, want her login and no role", who)
	}
	login := who.Login
	spec := &podiumv1.TaskSpec{Image: "busybox"}
	_, err := carol.tasks.Submit(ctxT(t), connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	wantCode(t, "a person without a role submitting", err, connect.CodePermissionDenied,
		tailnet.CapName, "podium user add "+login+" --role member")
	_, err = carol.tasks.List(ctxT(t), connect.NewRequest(&podiumv1.ListRequest{}))
	wantCode(t, "a person without a role listing", err, connect.CodePermissionDenied, tailnet.CapName)

	// A user row with her login makes her a member.
	h := sha256.Sum256([]byte("unused on the tailnet " + login))
	if _, err := e.r.Store().AddUser(ctxT(t), login, "member", h[:], "test"); err != nil {
		t.Fatal(err)
	}
	sub, err := carol.tasks.Submit(ctxT(t), connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatalf("a member's submit: %v", err)
	}
	if sub.Msg.Task.RequestedBy != login {
		t.Errorf("requested_by %q, want %s", sub.Msg.Task.RequestedBy, login)
	}
	_, err = carol.admin.CreateEnrollmentToken(ctxT(t), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	// She is told to ask an admin, not how to make herself one.
	wantCode(t, "a member minting an enrollment token", err, connect.CodePermissionDenied,
		"needs the admin role", "is a member", "ask an admin to do it")

	// A grant in the tailnet policy wins over the row.
	e.tn.Control.SetGlobalAppCaps(tailcfg.PeerCapMap{tailnet.CapName: {`{"role": "admin"}`}})
	coordtest.Eventually(t, 30*time.Second, "the tailnet grant to reach the coordinator", func() bool {
		return carol.whoami(t).RoleFrom == "tailnet grant"
	})
	if who := carol.whoami(t); who.Role != "admin" {
		t.Errorf("WhoAmI after the grant = %v, want admin", who)
	}
	if _, err := carol.admin.CreateEnrollmentToken(ctxT(t), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{})); err != nil {
		t.Errorf("an admin by grant minting a token: %v", err)
	}
}

// --default-role gives a signed-in person with neither a grant nor a row a
// role.
func TestTailnetDefaultRole(t *testing.T) {
	t.Parallel()
	e := startWith(t, server.TailnetConfig{DefaultRole: "viewer"})
	dave := e.join(t, "dave-laptop")
	if who := dave.whoami(t); who.Role != "viewer" || who.RoleFrom != "default" {
		t.Fatalf("WhoAmI = %v, want viewer by default", who)
	}
	if _, err := dave.tasks.List(ctxT(t), connect.NewRequest(&podiumv1.ListRequest{})); err != nil {
		t.Errorf("a viewer's list: %v", err)
	}
	_, err := dave.tasks.Submit(ctxT(t), connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	wantCode(t, "a viewer's submit", err, connect.CodePermissionDenied, "needs the member role", "is a viewer")
}

// With --allow-untagged-nodes a person's device may be enrolled as a node.
// Anything running there (other people's tasks) calls from that device, so
// it must not act as the person: once the device is a node, the people API
// refuses it and says why.
func TestUntaggedNodeDeviceIsNotItsOwner(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	bob := e.join(t, "bob-desktop")
	if _, err := bob.tasks.List(ctxT(t), connect.NewRequest(&podiumv1.ListRequest{})); err != nil {
		t.Fatalf("bob's list before his device is a node: %v", err)
	}
	enrolled, err := bob.enroll(ctxT(t), bob.token(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.tasks.List(ctxT(t), connect.NewRequest(&podiumv1.ListRequest{}))
	wantCode(t, "the people API from a device enrolled as a node", err, connect.CodePermissionDenied,
		"enrolled as node "+enrolled.NodeId, "it is a node")
	_, err = bob.admin.CreateEnrollmentToken(ctxT(t), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	wantCode(t, "an enrollment token from a device enrolled as a node", err, connect.CodePermissionDenied, "it is a node")
	// The device is still a node.
	st, err := bob.hello(ctxT(t), enrolled.NodeId, enrolled.NodeKey)
	if err != nil {
		t.Fatalf("the untagged node's stream: %v", err)
	}
	st.CloseRequest()
}
