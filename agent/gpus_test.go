package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/gpu"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// gpuCoordinator hands the test every Hello, heartbeat and event a node
// sends, acks every event, and sends the node the assignments the test
// pushes.
type gpuCoordinator struct {
	podiumv1connect.UnimplementedNodeServiceHandler
	hello      chan *podiumv1.Hello
	heartbeats chan *podiumv1.Heartbeat
	events     chan *podiumv1.TaskEvent
	assign     chan *podiumv1.Assign
}

func (c *gpuCoordinator) Stream(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	c.hello <- first.GetHello()
	var sendMu sync.Mutex
	send := func(m *podiumv1.StreamResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	if err := send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HelloAck{HelloAck: &podiumv1.HelloAck{
		NodeId: first.GetHello().GetNodeId(), HeartbeatIntervalMs: 60_000}}}); err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-c.assign:
				if send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: a}}) != nil {
					return
				}
			}
		}
	}()
	for {
		msg, err := stream.Receive()
		if err != nil {
			return nil
		}
		if hb := msg.GetHeartbeat(); hb != nil {
			c.heartbeats <- hb
		}
		for _, ev := range msg.GetEvents().GetEvents() {
			c.events <- ev
			if err := send(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Ack{Ack: &podiumv1.Ack{
				TaskId: ev.GetTaskId(), Attempt: ev.GetAttempt(), AckedSeq: ev.GetSeq(),
			}}}); err != nil {
				return nil
			}
		}
	}
}

// standInNvidiaSMI writes a stand-in nvidia-smi into dir that prints what
// the file list in dir holds, in nvidia-smi's --query-gpu format. It stands
// in for the real one because this machine has no NVIDIA GPU or driver;
// agent/gpu's tests parse output captured from real machines.
func standInNvidiaSMI(t *testing.T, dir string) (setGPUs func(n int) []gpu.GPU) {
	t.Helper()
	list := filepath.Join(dir, "gpus.txt")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$*\" = %q ] || { echo \"unexpected arguments: $*\" >&2; exit 64; }\ncat %q\n",
		strings.Join(gpu.Query, " "), list)
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return func(n int) []gpu.GPU {
		var b strings.Builder
		var gs []gpu.GPU
		for i := range n {
			g := gpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08x-1111-2222-3333-444444444444", i+0xa0), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}
			fmt.Fprintf(&b, "%d, %s, %s, %d MiB\n", g.Index, g.UUID, g.Model, g.MemoryMiB)
			gs = append(gs, g)
		}
		if err := os.WriteFile(list, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return gs
	}
}

func sameGPUs(got []*podiumv1.Gpu, want []gpu.GPU) bool {
	if len(got) != len(want) {
		return false
	}
	for i, g := range got {
		w := want[i]
		if int(g.GetIndex()) != w.Index || g.GetUuid() != w.UUID || g.GetModel() != w.Model || g.GetMemoryMb() != w.MemoryMiB {
			return false
		}
	}
	return true
}

// The whole agent with a stand-in nvidia-smi on PATH (this machine has no
// NVIDIA GPU or driver; the stand-in prints what a real one prints): the node
// reports its GPU in Hello; after SIGHUP it reports the GPUs nvidia-smi lists
// now; an assignment asking more GPUs than are free is given back to the
// coordinator (QUEUED, saying why) rather than run; and once a task's
// attempt ends, its GPUs are free for the next.
//
// The tasks asking GPUs fail to start: the start needs the NVIDIA container
// runtime, which this machine lacks (executor's
// TestTaskContainerGetsADeviceRequestForExactlyItsGPUs checks the container
// they are given). Not parallel: it sets PATH, and sends the process SIGHUP.
func TestNodeReportsItsGPUsAndGivesBackWhatItCannotServe(t *testing.T) {
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	bin := t.TempDir()
	setGPUs := standInNvidiaSMI(t, bin)
	one := setGPUs(1)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	coord := &gpuCoordinator{
		hello:      make(chan *podiumv1.Hello, 10),
		heartbeats: make(chan *podiumv1.Heartbeat, 100),
		events:     make(chan *podiumv1.TaskEvent, 1000),
		assign:     make(chan *podiumv1.Assign, 10),
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
		DataDir:    dir,
		MaxTasks:   4,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		RunnerPath: agenttest.Runner(t),
		Limits:     executor.Limits{MaxCPU: 2, MaxMemoryMB: 4096, MaxPids: 1000, MaxTimeout: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	h := wait.Recv(t, 30*time.Second, "the agent's Hello", coord.hello)
	if !sameGPUs(h.GetCapacity().GetGpus(), one) {
		t.Fatalf("Hello reports GPUs %v, want the one nvidia-smi lists (%+v)", h.GetCapacity().GetGpus(), one)
	}

	// Two GPUs now (one was added, or the driver fixed); the operator sends
	// SIGHUP and the next heartbeat, sent at once, says so.
	two := setGPUs(2)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		hb := wait.Recv(t, time.Until(deadline), "a heartbeat reporting the GPUs found after SIGHUP", coord.heartbeats)
		if sameGPUs(hb.GetCapacity().GetGpus(), two) {
			break
		}
	}

	task := func(id string, gpus int32) *podiumv1.Assign {
		return &podiumv1.Assign{TaskId: fmt.Sprintf("%s-%d", id, os.Getpid()), Attempt: 1, Spec: &podiumv1.TaskSpec{
			Image: image, Command: []string{"nvidia-smi", "-L"},
			Resources: &podiumv1.Resources{Gpus: gpus, GpuModel: "NVIDIA H100*"},
		}}
	}
	// The node takes the assignments in order: the first takes both GPUs
	// as it is accepted, so the second finds none free.
	first, second := task("t-gpu-both", 2), task("t-gpu-one", 1)
	coord.assign <- first
	coord.assign <- second
	var firstFinal, secondStatus *podiumv1.StatusChange
	for firstFinal == nil || secondStatus == nil {
		ev := wait.Recv(t, 60*time.Second, "the first task's end and the second's answer", coord.events)
		st := ev.GetStatus()
		switch {
		case st == nil:
		case ev.GetTaskId() == second.GetTaskId():
			secondStatus = st
		case ev.GetTaskId() == first.GetTaskId() && st.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED:
			firstFinal = st
		}
	}
	if secondStatus.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED ||
		!strings.Contains(secondStatus.GetReason(), `node has 0 free of the 1 GPU matching "NVIDIA H100*" the task asks`) {
		t.Fatalf("the task asking a GPU while none is free: %v, want it given back (QUEUED) saying no GPU is free", secondStatus)
	}
	// No NVIDIA runtime here: the engine refuses the device request.
	if firstFinal.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(firstFinal.GetReason(), "nvidia") {
		t.Fatalf("the task given both GPUs ended %v; want FAILED because this machine has no NVIDIA runtime", firstFinal)
	}

	// Its attempt over, both GPUs are free again: the second task, placed
	// here again, is taken.
	coord.assign <- &podiumv1.Assign{TaskId: second.GetTaskId(), Attempt: 2, Spec: second.GetSpec()}
	for {
		ev := wait.Recv(t, 60*time.Second, "the second task's new attempt to be taken", coord.events)
		if ev.GetTaskId() != second.GetTaskId() || ev.GetAttempt() != 2 || ev.GetStatus() == nil {
			continue
		}
		if s := ev.GetStatus().GetState(); s != podiumv1.TaskState_TASK_STATE_PROVISIONING {
			t.Fatalf("the second task's new attempt: %v, want PROVISIONING", ev.GetStatus())
		}
		break
	}
	for {
		ev := wait.Recv(t, 60*time.Second, "the second task's end", coord.events)
		if ev.GetTaskId() == second.GetTaskId() && ev.GetStatus().GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			break
		}
	}
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
}
