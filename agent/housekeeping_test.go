package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/imagegc"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// The whole agent: a finished attempt's directory stays while the
// coordinator has not acknowledged its terminal status, and is gone once it
// has; the image the task used is in the agent's record of uses.
func TestAttemptDataGoesAfterTheAck(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	coord := &coordinator{
		assign: &podiumv1.Assign{TaskId: fmt.Sprintf("t-agent-ack-%d", os.Getpid()), Attempt: 1, Spec: &podiumv1.TaskSpec{
			Image: image, Command: []string{"sh", "-c", "echo hi"},
		}},
		hello:     make(chan *podiumv1.Hello, 10),
		events:    make(chan *podiumv1.TaskEvent, 1000),
		holdFinal: make(chan struct{}),
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
		MaxTasks:   1,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		RunnerPath: agenttest.Runner(t),
		// Never under it: this test removes no image.
		ImageGCLowFree: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	for {
		ev := wait.Recv(t, 60*time.Second, "the task's terminal status", coord.events)
		if s := ev.GetStatus(); s.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			if s.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				t.Fatalf("final %v, want SUCCEEDED", s)
			}
			break
		}
	}
	taskDir := filepath.Join(dir, "tasks", attempt.FileName(attempt.Of(coord.assign)))
	if _, err := os.Stat(filepath.Join(taskDir, "output.log")); err != nil {
		t.Fatalf("the attempt's data is gone before the coordinator acknowledged its terminal status: %v", err)
	}
	close(coord.holdFinal)
	wait.For(t, 30*time.Second, "the attempt's directory to go after the acknowledgement", func() bool {
		_, err := os.Stat(taskDir)
		return os.IsNotExist(err)
	})

	info, err := dc.ImageInspect(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, imagegc.RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Images map[string]time.Time `json:"images"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Images[info.ID].IsZero() {
		t.Fatalf("the record of image uses %s (%v) does not have the task's image %s", b, err, info.ID)
	}

	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
}
