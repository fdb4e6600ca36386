package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/podiumhq/podium/internal/coordtest"
	"github.com/podiumhq/podium/internal/dockertest"
	"github.com/podiumhq/podium/internal/pgtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// binDir holds the binaries built once for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podium-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/podium", "../../cmd/podium-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build the binaries:", err)
		os.Exit(2)
	}
	binDir = dir
	code := pgtest.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is one coordinator with one enrolled agent running as a process.
type env struct {
	t     *testing.T
	r     *coordtest.Replica
	image string
	node  string
	data  string
	agent *exec.Cmd
	alog  *syncBuffer
}

func newEnv(t *testing.T, labels ...string) *env {
	t.Helper()
	e := &env{t: t, image: dockertest.EnsureImage(t), data: t.TempDir(), alog: &syncBuffer{}}
	e.r, _ = coordtest.New(t)
	ctx := context.Background()
	tok, err := e.r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: labels}))
	if err != nil {
		t.Fatal(err)
	}
	enroll := exec.Command(filepath.Join(binDir, "podium-agent"), "enroll", "--coordinator", e.r.URL(),
		"--token", tok.Msg.Token, "--data-dir", e.data)
	var stderr bytes.Buffer
	enroll.Stderr = &stderr
	out, err := enroll.Output()
	if err != nil {
		t.Fatalf("podium-agent enroll: %v\n%s", err, stderr.String())
	}
	e.node = string(bytes.TrimSpace(lastLine(out)))
	t.Cleanup(func() {
		e.stopAgent()
		if t.Failed() {
			t.Logf("agent log:\n%s", e.alog.String())
		}
	})
	e.startAgent()
	return e
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func (e *env) startAgent() {
	e.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "podium-agent"), "run", "--data-dir", e.data, "--max-tasks", "4")
	cmd.Stdout, cmd.Stderr = e.alog, e.alog
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.agent = cmd
	e.waitNode(podiumv1.NodeStatus_NODE_STATUS_ONLINE)
}

func (e *env) stopAgent() {
	if e.agent == nil {
		return
	}
	_ = e.agent.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = e.agent.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = e.agent.Process.Kill()
		<-done
	}
	e.agent = nil
}

func (e *env) waitNode(want podiumv1.NodeStatus) {
	e.t.Helper()
	coordtest.Eventually(e.t, 30*time.Second, "the node to be "+want.String(), func() bool {
		res, err := e.r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		for _, n := range res.Msg.Nodes {
			if n.Id == e.node && n.Status == want && (want != podiumv1.NodeStatus_NODE_STATUS_ONLINE || n.Replica != "") {
				return true
			}
		}
		return false
	})
}

// result is what a user sees of one CLI invocation.
type result struct {
	stdout, stderr []byte
	code           int
}

func (e *env) podiumCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "podium"), args...)
	cmd.Env = append(os.Environ(), "PODIUM_SERVER="+e.r.URL(), "PODIUM_TOKEN="+coordtest.Token)
	return cmd
}

func (e *env) podium(args ...string) result {
	e.t.Helper()
	cmd := e.podiumCmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("podium %v: %v", args, err)
	}
	return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: code}
}

var taskIDRe = regexp.MustCompile(`task_[0-9A-Z]{26}`)

// taskID is the task id podium run announced on stderr.
func (r result) taskID(t *testing.T) string {
	t.Helper()
	id := taskIDRe.Find(r.stderr)
	if id == nil {
		t.Fatalf("podium run printed no task id; stderr:\n%s", r.stderr)
	}
	return string(id)
}

func (e *env) task(id string) *podiumv1.Task {
	e.t.Helper()
	res, err := e.r.Tasks().Get(context.Background(), connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.Task
}

// containersOf lists the Docker containers labelled with a task, stopped or not.
func containersOf(t *testing.T, taskID string) []container.Summary {
	t.Helper()
	c := dockertest.Client(t)
	cs, err := c.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "podium.task="+taskID))})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
