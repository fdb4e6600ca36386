package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// syncBuffer is a log the test reads while the agent writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRestartKeepsRedactingWithSecretsFromAdopt: a real agent runs a task
// that prints its secret (from its environment) in pieces, raw and in
// base64, line after line; the agent is stopped in the middle and started
// again, and the coordinator's adoption sends the secret again. Every line,
// before and after the restart, reaches the coordinator once with the
// secret as [redacted:db-password]; the agent's data directory (its spool)
// holds no value outside the task's raw runner log, and the agent's log
// none at all.
func TestRestartKeepsRedactingWithSecretsFromAdopt(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	const n = 30
	const value = "hunter2-s3cr3t-value"
	secrets := []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(value), Env: "S"}}
	script := fmt.Sprintf(`for i in $(seq 1 %d); do printf 'line %%d %%s' $i "${S:0:5}"; sleep 0.05; `+
		`printf '%%s %%s\n' "${S:5}" "$(printf %%s "$S" | base64)"; done`, n)
	coord := &coordinator{
		assign: &podiumv1.Assign{TaskId: fmt.Sprintf("t-agent-secrets-%d", os.Getpid()), Attempt: 1,
			Spec: &podiumv1.TaskSpec{Image: image, Command: []string{"sh", "-c", script}}, Secrets: secrets},
		hello:        make(chan *podiumv1.Hello, 10),
		events:       make(chan *podiumv1.TaskEvent, 1000),
		adoptSecrets: secrets,
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
	logs := &syncBuffer{}
	runAgent := func() (context.CancelFunc, chan error) {
		a, err := agent.New(agent.Config{
			DataDir:    dir,
			MaxTasks:   2,
			Logger:     slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
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
				if strings.Contains(ev.String(), value) || strings.Contains(ev.String(), base64.StdEncoding.EncodeToString([]byte(value))) {
					t.Fatalf("an event holds the secret: %v", ev)
				}
				if l := ev.GetLog(); l != nil {
					stdout.Write(l.GetData())
				}
				if s := ev.GetStatus(); s != nil && s.GetState() >= podiumv1.TaskState_TASK_STATE_SUCCEEDED {
					final = s
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("waiting for %s: nothing more within 30 s; output so far %q", what, stdout.String())
			}
		}
	}

	cancel, done := runAgent()
	defer cancel()
	wait.Recv(t, 20*time.Second, "the agent's Hello", coord.hello)
	read("line 5", func() bool { return strings.Contains(stdout.String(), "line 5 ") })
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	// Nothing in the data directory holds the value but the task's own
	// runner log, which is its raw output (removed with the attempt).
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeType != 0 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(value)) && filepath.Base(path) != "output.log" {
			t.Errorf("%s holds the secret's value", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
		fmt.Fprintf(&want, "line %d [redacted:db-password] [redacted:db-password]\n", i)
	}
	if stdout.String() != want.String() || final.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("output %q and final %v, want every line once, redacted, and SUCCEEDED", stdout.String(), final)
	}
	// The attempt's directory goes once the coordinator has acknowledged
	// the terminal status, which it does just after the test sees it.
	wait.For(t, 30*time.Second, "the attempt's directory to go after the acknowledgement", func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, "tasks"))
		return len(entries) == 0
	})
	cancel()
	if err := wait.Recv(t, 30*time.Second, "Run to return on the second shutdown", done); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	if strings.Contains(logs.String(), value) {
		t.Fatal("the agent's log holds the secret's value")
	}
	agenttest.AssertNoContainers(t, dc, nodeID)
	if _, err := os.Stat(filepath.Join(dir, "tasks")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(dir, "tasks"))
		if len(entries) > 0 {
			t.Fatalf("the attempt's directory (and its raw runner log) is left: %v", entries)
		}
	}
}
