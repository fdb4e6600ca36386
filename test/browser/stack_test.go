package browser

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// stack is one test's own Podium: a database, a coordinator replica in this
// process serving the console, and an enrolled agent running as a process
// that runs tasks in Docker. Each test owns one, so the tests run in
// parallel and see only their own tasks and nodes.
type stack struct {
	t     *testing.T
	r     *coordtest.Replica
	image string
	node  string
	data  string
	agent *exec.Cmd
	done  chan struct{} // closed when the agent process has exited
	alog  *syncBuffer
}

// stackOptions choose the optional parts of a stack.
type stackOptions struct {
	// s3 gives the replica a real object store for artifacts.
	s3 bool
}

func newStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	s := &stack{t: t, image: dockertest.EnsureImage(t), data: t.TempDir(), alog: &syncBuffer{}}
	var ropts coordtest.Options
	if opts.s3 {
		srv := s3test.Start(t)
		ropts.Artifacts = artifacts.Config{Endpoint: srv.Endpoint, Bucket: "podium-artifacts", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	}
	db := pgtest.NewDatabase(t)
	s.r = coordtest.Start(t, db.URL, ropts)
	tok, err := s.r.Admin().CreateEnrollmentToken(context.Background(), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	enroll := exec.Command(filepath.Join(binDir, "podium-agent"), "enroll", "--coordinator", s.r.URL(),
		"--token", tok.Msg.Token, "--data-dir", s.data)
	var stderr bytes.Buffer
	enroll.Stderr = &stderr
	out, err := enroll.Output()
	if err != nil {
		t.Fatalf("podium-agent enroll: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	s.node = strings.TrimSpace(lines[len(lines)-1])
	t.Cleanup(func() {
		s.stopAgent()
		// Every test sees its tasks to their end: anything of its node
		// still in the engine now is a leak.
		dc := dockertest.Client(t)
		dockertest.AssertNothingLeftFor(t, dc, "podium.node="+s.node)
		dockertest.RemoveAllFor(dc, "podium.node="+s.node)
		if t.Failed() {
			t.Logf("agent log:\n%s", s.alog.String())
		}
	})
	s.startAgent()
	return s
}

func (s *stack) startAgent() {
	s.t.Helper()
	// No warm network pool: every package that runs agents at once shares
	// the engine's 31 address pools.
	cmd := exec.Command(filepath.Join(binDir, "podium-agent"), "run", "--data-dir", s.data, "--max-tasks", "4", "--network-pool", "0")
	cmd.Stdout, cmd.Stderr = s.alog, s.alog
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.agent, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	wait.For(s.t, 30*time.Second, "the node to be online", func() bool {
		res, err := s.r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		for _, n := range res.Msg.Nodes {
			if n.Id == s.node && n.Status == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.Replica != "" {
				return true
			}
		}
		return false
	})
}

func (s *stack) stopAgent() {
	if s.agent == nil {
		return
	}
	_ = s.agent.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.agent.Process.Kill()
		<-s.done
	}
	s.agent = nil
}

// addUser adds a person with a role and returns their personal API token,
// what they paste into the console's login form.
func (s *stack) addUser(name, role string) string {
	s.t.Helper()
	res, err := s.r.Admin().AddUser(context.Background(), connect.NewRequest(&podiumv1.AddUserRequest{Name: name, Role: role}))
	if err != nil {
		s.t.Fatalf("add user %s: %v", name, err)
	}
	return res.Msg.Token
}

// podiumCmd is the real CLI with the replica's address and token.
func (s *stack) podiumCmd(token string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "podium"), args...)
	cmd.Env = append(os.Environ(), "PODIUM_SERVER="+s.r.URL(), "PODIUM_TOKEN="+token)
	return cmd
}

var taskIDRe = regexp.MustCompile(`task_[0-9A-Z]{26}`)

// submit starts a task as the token's person with `podium run --detach` and
// returns its id.
func (s *stack) submit(token string, args ...string) string {
	s.t.Helper()
	cmd := s.podiumCmd(token, append([]string{"run", "--detach", "--image", s.image, "--"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	id := taskIDRe.Find(out)
	if err != nil || id == nil {
		s.t.Fatalf("podium run --detach: %v, printed %q\n%s", err, out, stderr.String())
	}
	return string(id)
}

// task is the task as the API has it.
func (s *stack) task(id string) *podiumv1.Task {
	s.t.Helper()
	res, err := s.r.Tasks().Get(context.Background(), connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Msg.Task
}

// waitState waits until the task is in state want; it fails at once if the
// task ends in another state.
func (s *stack) waitState(id string, want podiumv1.TaskState, d time.Duration) {
	s.t.Helper()
	wait.For(s.t, d, "task "+id+" to be "+want.String(), func() bool {
		tk := s.task(id)
		if tk.State != want && ended(tk.State) {
			s.t.Fatalf("task %s ended %v (%s), want %v", id, tk.State, tk.Reason, want)
		}
		return tk.State == want
	})
}

func ended(st podiumv1.TaskState) bool {
	switch st {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED, podiumv1.TaskState_TASK_STATE_CANCELLED:
		return true
	}
	return false
}

// following is a CLI command that follows a task (podium run, podium logs
// -f) while the test goes on.
type following struct {
	cmd         *exec.Cmd
	out, stderr *syncBuffer
	done        chan struct{}
}

func (s *stack) follow(token string, args ...string) *following {
	s.t.Helper()
	f := &following{cmd: s.podiumCmd(token, args...), out: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.stderr
	if err := f.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	s.t.Cleanup(func() {
		select {
		case <-f.done:
		default:
			_ = f.cmd.Process.Kill()
			<-f.done
		}
	})
	return f
}

// exitCode waits for the command to exit and returns its exit code.
func (f *following) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(d):
		t.Fatalf("gave up after %s waiting for %v to exit; it printed:\n%s\n%s", d, f.cmd.Args[1:], f.out.String(), f.stderr.String())
	}
	return f.cmd.ProcessState.ExitCode()
}

// syncBuffer is a bytes.Buffer a process writes while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
