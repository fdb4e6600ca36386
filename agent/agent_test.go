package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/internal/dockertest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// coordinator answers one node's Hello, assigns it one task and hands every
// event the node sends to the test.
type coordinator struct {
	podiumv1connect.UnimplementedNodeServiceHandler
	assign *podiumv1.Assign
	hello  chan *podiumv1.Hello
	events chan *podiumv1.TaskEvent
}

func (c *coordinator) Stream(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	c.hello <- first.GetHello()
	if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HelloAck{HelloAck: &podiumv1.HelloAck{
		NodeId: first.GetHello().GetNodeId(), HeartbeatIntervalMs: 1000,
	}}}); err != nil {
		return err
	}
	if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: c.assign}}); err != nil {
		return err
	}
	for {
		msg, err := stream.Receive()
		if err != nil {
			return nil
		}
		for _, ev := range msg.GetEvents().GetEvents() {
			c.events <- ev
			if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Ack{Ack: &podiumv1.Ack{
				TaskId: ev.GetTaskId(), Attempt: ev.GetAttempt(), AckedSeq: ev.GetSeq(),
			}}}); err != nil {
				return nil
			}
		}
	}
}

func TestNewWithoutIdentity(t *testing.T) {
	_, err := agent.New(agent.Config{DataDir: t.TempDir()})
	if !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("error %v, want ErrNotEnrolled", err)
	}
}

// TestRunAndShutdown runs the whole agent against an in-process coordinator:
// it connects, runs the assigned task, and on shutdown stops and removes the
// task's container before Run returns.
func TestRunAndShutdown(t *testing.T) {
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	coord := &coordinator{
		assign: &podiumv1.Assign{TaskId: fmt.Sprintf("t-agent-%d", os.Getpid()), Attempt: 1, Spec: &podiumv1.TaskSpec{
			Image: image, Command: []string{"sh", "-c", "echo up; sleep 600"},
		}},
		hello:  make(chan *podiumv1.Hello, 10),
		events: make(chan *podiumv1.TaskEvent, 1000),
	}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewNodeServiceHandler(coord))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	dir := t.TempDir()
	nodeID := agenttest.NodeID(t)
	if err := identity.Save(dir, &identity.Identity{CoordinatorURL: srv.URL, NodeID: nodeID, NodeKey: "k"}); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		DataDir:       dir,
		MaxTasks:      2,
		Logger:        slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		ShutdownGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	select {
	case h := <-coord.hello:
		if h.GetNodeId() != nodeID || h.GetCapacity().GetMaxTasks() != 2 || h.GetCapacity().GetCpuCores() < 1 {
			t.Fatalf("hello %v", h)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not say Hello")
	}
	waitFor := func(what string, ok func(*podiumv1.TaskEvent) bool) {
		t.Helper()
		for {
			select {
			case ev := <-coord.events:
				if ok(ev) {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %s within 30 s", what)
			}
		}
	}
	waitFor("output", func(ev *podiumv1.TaskEvent) bool { return string(ev.GetLog().GetData()) == "up\n" })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v on shutdown, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of shutdown")
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
