package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A node that asks for it (Hello.heartbeat_acks) gets every heartbeat
// answered: its proof that the control plane still hears it, without which
// it fences itself past the offline threshold.
func TestHeartbeatsAreAnsweredForANodeThatFences(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Capacity: &podiumv1.Capacity{MaxTasks: 1}, HeartbeatAcks: true}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil || m.GetHelloAck() == nil {
		t.Fatalf("waiting for the HelloAck: %v %v", m, err)
	}
	for i := range 3 {
		if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
			Capacity: &podiumv1.Capacity{MaxTasks: 1}}}}); err != nil {
			t.Fatal(err)
		}
		m, err := st.Receive()
		if err != nil {
			t.Fatalf("waiting for the answer to heartbeat %d: %v", i+1, err)
		}
		if m.GetHeartbeatAck() == nil {
			t.Fatalf("heartbeat %d was answered with %v, want a HeartbeatAck", i+1, m)
		}
	}
}
