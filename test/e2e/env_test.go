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

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/binaries"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// binDir holds the binaries built once for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, remove, err := binaries.Temp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	binDir = dir
	code := pgtest.Run(m)
	remove()
	os.Exit(code)
}

// env is one coordinator with one enrolled agent running as a process.
type env struct {
	t  *testing.T
	r  *coordtest.Replica
	db pgtest.Database
	// opts are the replica's options, kept for replaceCoordinator.
	opts  coordtest.Options
	image string
	node  string
	data  string
	// agentArgs are added to every `podium-agent run`.
	agentArgs []string
	agent     *exec.Cmd
	agentDone chan struct{} // closed when the agent process has exited
	alog      *syncBuffer
}

func newEnv(t *testing.T, labels ...string) *env {
	t.Helper()
	return newEnvWith(t, nil, labels...)
}

// newEnvWith is newEnv with flags for the agent.
func newEnvWith(t *testing.T, agentArgs []string, labels ...string) *env {
	t.Helper()
	return newEnvOpts(t, coordtest.Options{}, agentArgs, labels...)
}

// newEnvWithArtifacts is newEnv with a replica that stores artifacts in s3.
func newEnvWithArtifacts(t *testing.T, s3 *s3test.Server) *env {
	t.Helper()
	return newEnvOpts(t, coordtest.Options{Artifacts: artifacts.Config{
		Endpoint: s3.Endpoint, Bucket: "podium-artifacts", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey,
		PartSize: 5 << 20, // S3's smallest: a 50 MB artifact is a multipart upload of many parts
	}}, nil)
}

// newEnvOpts is newEnv with the replica's options and flags for the agent.
func newEnvOpts(t *testing.T, opts coordtest.Options, agentArgs []string, labels ...string) *env {
	t.Helper()
	return newEnvEnroll(t, opts, nil, agentArgs, labels...)
}

// newEnvEnroll is newEnvOpts with flags for `podium-agent enroll`.
func newEnvEnroll(t *testing.T, opts coordtest.Options, enrollArgs, agentArgs []string, labels ...string) *env {
	t.Helper()
	e := &env{t: t, image: dockertest.EnsureImage(t), data: t.TempDir(), alog: &syncBuffer{}, agentArgs: agentArgs, opts: opts}
	e.db = pgtest.NewDatabase(t)
	e.r = coordtest.Start(t, e.db.URL, opts)
	ctx := context.Background()
	tok, err := e.r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: labels}))
	if err != nil {
		t.Fatal(err)
	}
	enroll := exec.Command(filepath.Join(binDir, "podium-agent"), append([]string{"enroll", "--coordinator", e.r.URL(),
		"--token", tok.Msg.Token, "--data-dir", e.data}, enrollArgs...)...)
	var stderr bytes.Buffer
	enroll.Stderr = &stderr
	out, err := enroll.Output()
	if err != nil {
		t.Fatalf("podium-agent enroll: %v\n%s", err, stderr.String())
	}
	e.node = string(bytes.TrimSpace(lastLine(out)))
	t.Cleanup(func() {
		e.stopAgent()
		// Stopping the agent leaves tasks running by design, so every test
		// must see its tasks to their end: anything of its node still in
		// the engine now is a leak.
		dc := dockertest.Client(t)
		dockertest.AssertNothingLeftFor(t, dc, "podium.node="+e.node)
		dockertest.RemoveAllFor(dc, "podium.node="+e.node)
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
	// No warm network pool unless a test asks for one (--network-pool N in
	// its agentArgs, which come later and win): the engine has 31 address
	// pools for every network of every agent the suites run at once, and
	// two held ready by each agent would run them out.
	args := append([]string{"run", "--data-dir", e.data, "--max-tasks", "4", "--network-pool", "0"}, e.agentArgs...)
	cmd := exec.Command(filepath.Join(binDir, "podium-agent"), args...)
	cmd.Stdout, cmd.Stderr = e.alog, e.alog
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.agent = cmd
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.agentDone = done
	e.waitNode(podiumv1.NodeStatus_NODE_STATUS_ONLINE)
}

func (e *env) stopAgent() {
	if e.agent == nil {
		return
	}
	_ = e.agent.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.agentDone:
	case <-time.After(30 * time.Second):
		_ = e.agent.Process.Kill()
		<-e.agentDone
	}
	e.agent = nil
}

// killAgent kills the agent with SIGKILL: a crash, with no chance to tidy up.
func (e *env) killAgent() {
	e.t.Helper()
	if err := e.agent.Process.Kill(); err != nil {
		e.t.Fatal(err)
	}
	<-e.agentDone
	e.agent = nil
}

// replaceCoordinator stops the coordinator replica and starts a new one on
// the same database and the same address, where the agent and the CLI find
// it again.
func (e *env) replaceCoordinator() {
	e.t.Helper()
	addr := e.r.Addr()
	e.r.Stop()
	opts := e.opts
	opts.Listen = addr
	e.r = coordtest.Start(e.t, e.db.URL, opts)
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
