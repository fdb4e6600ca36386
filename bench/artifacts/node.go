package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// node plays an agent over the real protocol: enrolled, connected, holding
// one running task whose artifacts it uploads.
type node struct {
	id, key string
	taskID  string
	attempt int32
	nodes   podiumv1connect.NodeServiceClient

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// bearerTransport speaks h2c, as agents and the CLI do, and sends the API
// token (which the node service ignores).
type bearerTransport struct{ next http.RoundTripper }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return b.next.RoundTrip(r)
}

func newNode(ctx context.Context, url string) (*node, error) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: bearerTransport{&http.Transport{Protocols: &p}}}
	admin := podiumv1connect.NewAdminServiceClient(hc, url)
	tasks := podiumv1connect.NewTaskServiceClient(hc, url)
	n := &node{nodes: podiumv1connect.NewNodeServiceClient(hc, url)}

	tok, err := admin.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		return nil, fmt.Errorf("create an enrollment token: %w", err)
	}
	enr, err := n.nodes.Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.GetToken(), Hostname: "bench"}))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	n.id, n.key = enr.Msg.GetNodeId(), enr.Msg.GetNodeKey()

	sctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	st := n.nodes.Stream(sctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: n.id, NodeKey: n.key, Hostname: "bench", Capacity: &podiumv1.Capacity{MaxTasks: 1}}}}); err != nil {
		cancel()
		return nil, err
	}
	m, err := st.Receive()
	if err != nil || m.GetHelloAck() == nil {
		cancel()
		return nil, fmt.Errorf("hello: got %v, %v; want a HelloAck", m, err)
	}
	interval := time.Duration(m.GetHelloAck().GetHeartbeatIntervalMs()) * time.Millisecond
	sub, err := tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "bench"}}))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("submit: %w", err)
	}
	n.taskID = sub.Msg.GetTask().GetId()
	for n.attempt == 0 {
		m, err := st.Receive()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("wait for the assignment: %w", err)
		}
		if a := m.GetAssign(); a != nil && a.GetTaskId() == n.taskID {
			n.attempt = a.GetAttempt()
		}
	}
	running := func(seq uint64, s podiumv1.TaskState) *podiumv1.TaskEvent {
		return &podiumv1.TaskEvent{TaskId: n.taskID, Attempt: n.attempt, Seq: seq,
			Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
	}
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{Events: &podiumv1.EventBatch{Events: []*podiumv1.TaskEvent{
		running(1, podiumv1.TaskState_TASK_STATE_PROVISIONING), running(2, podiumv1.TaskState_TASK_STATE_RUNNING)}}}}); err != nil {
		cancel()
		return nil, err
	}
	// Read acks and heartbeat for as long as the benchmark runs, as an agent
	// does, so the node stays online and holds its task.
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		for {
			if _, err := st.Receive(); err != nil {
				return
			}
		}
	}()
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				_ = st.CloseRequest()
				return
			case <-t.C:
				_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{RunningTasks: 1}}})
			}
		}
	}()
	return n, nil
}

func (n *node) close() {
	n.cancel()
	n.wg.Wait()
}
