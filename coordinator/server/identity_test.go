package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/internal/testenv/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// Over the local transport the coordinator knows a caller only by the token,
// and says so; what it records as requested_by is "token".
func TestWhoAmIOverLocal(t *testing.T) {
	r, _ := coordtest.New(t)
	ctx := context.Background()
	res, err := r.Admin().WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Kind != podiumv1.CallerKind_CALLER_KIND_TOKEN || res.Msg.Login != "" || res.Msg.Transport != "local" {
		t.Errorf("WhoAmI = %v, want a token caller over local", res.Msg)
	}
	sub, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Msg.Task.RequestedBy != "token" {
		t.Errorf("requested_by %q, want token", sub.Msg.Task.RequestedBy)
	}
	_, err = podiumv1connectAdminWithToken(r, "wrong").WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("WhoAmI with a wrong token: %v, want Unauthenticated", err)
	}
}

// A rekey token re-enrolls the same node with a new key, keeping its labels;
// the old key stops working and an open stream on it ends. Without a tailnet
// there is no device to bind, so this is how a lost identity file is
// replaced.
func TestRekeyOverLocal(t *testing.T) {
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r, "gpu")
	old, _ := connectNode(t, ctx, r, id, key)

	_, err := r.Admin().RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: "node_nope"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("rekeying an unknown node: %v, want NotFound", err)
	}
	rk, err := r.Admin().RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: id}))
	if err != nil {
		t.Fatal(err)
	}
	// Until the token is used, nothing changes.
	if _, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: rk.Msg.Token + "x"})); err == nil {
		t.Fatal("a wrong token enrolled")
	}
	res, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: rk.Msg.Token, Hostname: "new-box"}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.NodeId != id || res.Msg.NodeKey == key || len(res.Msg.Labels) != 1 || res.Msg.Labels[0] != "gpu" {
		t.Fatalf("rekeyed as %v, want node %s with its label gpu and a new key", res.Msg, id)
	}
	// The stream on the old key is ended.
	for {
		if _, err := old.stream.Receive(); err != nil {
			break
		}
	}
	st := r.NodeClient().Stream(ctx)
	_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{NodeId: id, NodeKey: key}}})
	if _, err := st.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the old key after the rekey: %v, want Unauthenticated", err)
	}
	if _, ack := connectNode(t, ctx, r, id, res.Msg.NodeKey); ack.NodeId != id {
		t.Errorf("HelloAck for %s, want %s", ack.NodeId, id)
	}
}

func podiumv1connectAdminWithToken(r *coordtest.Replica, token string) podiumv1connect.AdminServiceClient {
	return podiumv1connect.NewAdminServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(hdr(token)))
}

// A transport that cannot work is refused before anything starts, with what
// to write instead.
func TestTransportConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  server.Config
		says string
	}{
		{server.Config{Transport: "wireguard", Token: "t"}, "want local, tailnet or host"},
		{server.Config{Transport: server.TransportLocal}, "PODIUM_TOKEN"},
		{server.Config{Transport: server.TransportTailnet, Listen: "7070"}, "want :PORT"},
		{server.Config{Transport: server.TransportTailnet, Listen: ":70700"}, "want :PORT"},
		{server.Config{Transport: server.TransportTailnet}, "--ts-state-dir"},
	} {
		tc.cfg.DatabaseURL = "postgres://unused"
		_, err := server.New(ctx, tc.cfg)
		if err == nil || !contains(err.Error(), tc.says) {
			t.Errorf("New(%+v): %v, want an error saying %q", tc.cfg, err, tc.says)
		}
	}
}
