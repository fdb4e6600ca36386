package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A rekey token re-enrolls the same node with a new key, keeping its labels;
// the old key stops working and an open stream on it ends. Without a tailnet
// there is no device to bind, so this is how a lost identity file is
// replaced.
func TestRekeyOverLocal(t *testing.T) {
	t.Parallel()
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
			if ctx.Err() != nil {
				t.Fatalf("gave up waiting for the stream on the old key to end: %v", err)
			}
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
