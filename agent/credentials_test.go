package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// TestRestartLeavesNoCredentialOnDisk: a real agent runs a task with a
// sidecar whose environment holds a password, under an assignment that
// carries a private registry login. The agent is stopped in the middle: its
// data directory (the spool above all) holds neither the registry password
// nor the sidecar's value. Started again, it adopts the task (and its
// sidecar) from what the spool kept, and the task runs to its end.
func TestRestartLeavesNoCredentialOnDisk(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	const (
		registryPassword = "registry-password-5ca1ab1e"
		sidecarValue     = "sidecar-env-value-0ddba11"
		n                = 20
	)
	script := fmt.Sprintf(`for i in $(seq 1 %d); do echo "line $i"; sleep 0.1; done`, n)
	coord := &coordinator{
		assign: &podiumv1.Assign{TaskId: fmt.Sprintf("t-agent-creds-%d", os.Getpid()), Attempt: 1,
			Spec: &podiumv1.TaskSpec{Image: image, Command: []string{"sh", "-c", script},
				Sidecars: []*podiumv1.Sidecar{{Name: "helper", Image: image, Command: []string{"sleep", "3600"},
					Env: map[string]string{"HELPER_PASSWORD": sidecarValue}}}},
			RegistryAuths: []*podiumv1.RegistryAuth{{Host: "docker.io", Username: "robot", Password: registryPassword}}},
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
	runAgent := func() (context.CancelFunc, chan error) {
		a, err := agent.New(agent.Config{
			DataDir:    dir,
			MaxTasks:   2,
			Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
			RunnerPath: agenttest.Runner(t),
			Limits:     executor.Limits{MaxCPU: 2, MaxMemoryMB: 4096, MaxPids: 1000, MaxTimeout: time.Hour},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return cancel, done
	}
	var stdout strings.Builder
	var final *podiumv1.StatusChange
	read := func(what string, until func() bool) {
		t.Helper()
		for !until() {
			select {
			case ev := <-coord.events:
				if l := ev.GetLog(); l != nil {
					stdout.Write(l.GetData())
				}
				if s := ev.GetStatus(); s != nil && s.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
					final = s
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("waiting for %s: nothing more within 60 s; output so far %q", what, stdout.String())
			}
		}
	}

	cancel, done := runAgent()
	defer cancel()
	wait.Recv(t, 20*time.Second, "the agent's Hello", coord.hello)
	read("line 3", func() bool { return strings.Contains(stdout.String(), "line 3\n") })
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	spooled := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeType != 0 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".spool") {
			spooled++
		}
		for _, v := range []string{registryPassword, sidecarValue} {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds %q", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if spooled == 0 {
		t.Fatal("the stopped agent left no spool file: the test looked at nothing")
	}

	cancel, done = runAgent()
	defer cancel()
	h := wait.Recv(t, 20*time.Second, "the restarted agent's Hello", coord.hello)
	if len(h.GetRunning()) != 1 {
		t.Fatalf("the restarted agent reports %v, want the task", h.GetRunning())
	}
	read("the task's end", func() bool { return final != nil })
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if stdout.String() != want.String() || final.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("output %q and final %v, want every line once and SUCCEEDED", stdout.String(), final)
	}
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on the second shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
}
