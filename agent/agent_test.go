package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// coordinator answers a node's Hello, adopting every task it reports from the
// highest seq it stored, assigns it one task on its first stream and acks and
// hands every event the node sends to the test, the way the real one stores
// them: once per seq.
type coordinator struct {
	podiumv1connect.UnimplementedNodeServiceHandler
	assign *podiumv1.Assign
	hello  chan *podiumv1.Hello
	events chan *podiumv1.TaskEvent
	// adoptSecrets are sent with every adoption, as the real coordinator
	// sends an attempt's secrets again to the node that holds it.
	adoptSecrets []*podiumv1.SecretValue
	// holdFinal, if set, holds the acknowledgement of a terminal status
	// until it is closed.
	holdFinal chan struct{}

	mu       sync.Mutex
	stored   uint64
	assigned bool
}

func (c *coordinator) Stream(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	c.hello <- first.GetHello()
	ack := &podiumv1.HelloAck{NodeId: first.GetHello().GetNodeId(), HeartbeatIntervalMs: 1000}
	c.mu.Lock()
	for _, r := range first.GetHello().GetRunning() {
		ack.Adopt = append(ack.Adopt, &podiumv1.Adopt{TaskId: r.GetTaskId(), Attempt: r.GetAttempt(), Keep: true, AckedSeq: c.stored,
			Secrets: c.adoptSecrets})
	}
	assign := !c.assigned
	c.assigned = true
	c.mu.Unlock()
	if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HelloAck{HelloAck: ack}}); err != nil {
		return err
	}
	if assign {
		if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: c.assign}}); err != nil {
			return err
		}
	}
	for {
		msg, err := stream.Receive()
		if err != nil {
			return nil
		}
		for _, ev := range msg.GetEvents().GetEvents() {
			c.mu.Lock()
			fresh := ev.GetSeq() == c.stored+1
			if fresh {
				c.stored++
			}
			top := c.stored
			c.mu.Unlock()
			if fresh {
				c.events <- ev
			}
			if c.holdFinal != nil && ev.GetStatus().GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				select {
				case <-c.holdFinal:
				case <-ctx.Done():
					return nil
				}
			}
			if err := stream.Send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Ack{Ack: &podiumv1.Ack{
				TaskId: ev.GetTaskId(), Attempt: ev.GetAttempt(), AckedSeq: top,
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

func TestNewWithoutRunner(t *testing.T) {
	dir := t.TempDir()
	if err := identity.Save(dir, &identity.Identity{CoordinatorURL: "http://127.0.0.1:1", NodeID: "n", NodeKey: "k"}); err != nil {
		t.Fatal(err)
	}
	_, err := agent.New(agent.Config{DataDir: dir, RunnerPath: filepath.Join(dir, "nope")})
	if err == nil || !strings.Contains(err.Error(), "--runner PATH") {
		t.Fatalf("error %v, want one that says how to give the runner", err)
	}
}

// TestRestartResumesTheTask runs the whole agent against an in-process
// coordinator: it connects and runs the assigned task; stopped, it leaves the
// task running; started again, it resumes the task and its output goes on
// from the byte it had reached, to the task's end.
func TestRestartResumesTheTask(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	const n = 30
	coord := &coordinator{
		assign: &podiumv1.Assign{TaskId: fmt.Sprintf("t-agent-%d", os.Getpid()), Attempt: 1, Spec: &podiumv1.TaskSpec{
			Image: image, Command: []string{"sh", "-c", fmt.Sprintf("for i in $(seq 1 %d); do echo $i; sleep 0.1; done", n)},
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
	runAgent := func(egress func(*agent.Config)) (context.CancelFunc, chan error) {
		cfg := agent.Config{
			DataDir:    dir,
			MaxTasks:   2,
			Logger:     slog.New(slog.NewTextHandler(testWriter{t}, nil)),
			RunnerPath: agenttest.Runner(t),
			Limits:     executor.Limits{MaxCPU: 2, MaxMemoryMB: 4096, MaxPids: 1000, MaxTimeout: time.Hour},
		}
		egress(&cfg)
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return cancel, done
	}
	hello := func() *podiumv1.Hello {
		select {
		case h := <-coord.hello:
			return h
		case <-time.After(20 * time.Second):
			t.Fatal("the agent did not say Hello")
			return nil
		}
	}
	var stdout strings.Builder
	var final *podiumv1.StatusChange
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			select {
			case ev := <-coord.events:
				if l := ev.GetLog(); l != nil {
					if l.GetOffset() != uint64(stdout.Len()) {
						t.Fatalf("chunk at offset %d, want %d", l.GetOffset(), stdout.Len())
					}
					stdout.Write(l.GetData())
				}
				if s := ev.GetStatus(); s != nil && s.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
					final = s
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("nothing more within 30 s; output so far %q", stdout.String())
			}
		}
	}

	// Without the egress filter nothing is refused, and the node says a
	// task may ask for any range.
	cancel, done := runAgent(func(*agent.Config) {})
	defer cancel()
	if h := hello(); h.GetNodeId() != nodeID || h.GetCapacity().GetMaxTasks() != 2 || h.GetCapacity().GetCpuCores() < 1 ||
		strings.Join(h.GetCapacity().GetLimits().GetPermitEgress(), " ") != "0.0.0.0/0 ::/0" || h.GetAllowPrivilegedSidecars() {
		t.Fatalf("hello %v", h)
	} else if l := h.GetCapacity().GetLimits(); l.GetMaxCpu() != 2 || l.GetMaxMemoryMb() != 4096 || l.GetMaxPids() != 1000 || l.GetMaxTimeoutSeconds() != 3600 {
		// The scheduler places by what the node says it allows.
		t.Fatalf("hello reports limits %v, want the agent's maxima", l)
	}
	read(func() bool { return strings.Contains(stdout.String(), "\n5\n") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v on shutdown, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of shutdown")
	}
	cs, err := dc.ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "podium.node="+nodeID))})
	if err != nil || len(cs) != 1 {
		t.Fatalf("the task's container must keep running without the agent: %d running (%v)", len(cs), err)
	}

	// Restarted with the filter (where this test may change iptables), the
	// node reports what its operator permits. The running task's network
	// was made without it and keeps running as it was.
	withFilter := os.Geteuid() == 0
	cancel, done = runAgent(func(c *agent.Config) {
		c.EgressFilter = withFilter
		c.PermitEgress = []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}
		c.AllowEgress = []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")}
		if !withFilter {
			c.PermitEgress, c.AllowEgress = nil, nil
		}
		c.AllowPrivilegedSidecars = true
	})
	defer cancel()
	h := hello()
	if !h.GetAllowPrivilegedSidecars() {
		t.Errorf("the agent started with --allow-privileged-sidecars does not say so in Hello: %v", h)
	}
	if len(h.GetRunning()) != 1 || h.GetRunning()[0].GetTaskId() != coord.assign.GetTaskId() {
		t.Fatalf("the restarted agent reports %v, want the task", h.GetRunning())
	}
	if got := strings.Join(h.GetCapacity().GetLimits().GetPermitEgress(), " "); withFilter && got != "10.20.0.0/16 192.0.2.10/32" {
		t.Errorf("with --permit-egress 10.20.0.0/16 --allow-egress 192.0.2.10/32 the node reports permit_egress %q", got)
	}
	read(func() bool { return final != nil })
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if stdout.String() != want.String() || final.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("output %q and final %v, want 1..%d once each and SUCCEEDED", stdout.String(), final, n)
	}
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on the second shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
