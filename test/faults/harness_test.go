package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// Deadlines bound hangs; they measure nothing.
const (
	readyWithin = 60 * time.Second  // a replica answering /readyz 200
	nodeWithin  = 90 * time.Second  // a node reaching a status
	runWithin   = 180 * time.Second // `podium run` exiting
	stopWithin  = 30 * time.Second  // a process ending on SIGTERM before SIGKILL
)

// logBuffer is a buffer a process writes while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

func (l *logBuffer) String() string { return string(l.Bytes()) }

// proc is a child process and a channel closed when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	// asked is set before the harness signals the process, so that an exit
	// nobody asked for (a panic, a fatal error) can be told apart.
	asked atomic.Bool
	// exit is how and when the process ended; read it after done.
	exit string
}

// startProc starts cmd and reaps it in a goroutine that ends with it.
func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.exit = fmt.Sprintf("at %s (%v)", time.Now().UTC().Format("15:04:05.000"), err)
		close(p.done)
	}()
	return p
}

// diedOnItsOwn says how the process ended if it exited without the harness
// asking it to, and "" while it runs or after a Kill or Stop.
func (p *proc) diedOnItsOwn() string {
	select {
	case <-p.done:
		if p.asked.Load() {
			return ""
		}
		return p.exit
	default:
		return ""
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.asked.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop SIGTERMs the process, SIGKILLs it after stopWithin, and waits for it.
func (p *proc) stop() {
	p.asked.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopWithin):
		p.kill()
	}
}

// FreeAddr is a free "127.0.0.1:PORT", for a replica that must be reached at
// a known address before it starts (a proxy in front of it, --advertise).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Replica is a `podium-coordinator serve` process on a fixed address, with
// the test token (coordtest.Token). Its log is printed if the test fails.
type Replica struct {
	// Addr is the "127.0.0.1:PORT" it listens on, kept across restarts.
	Addr string
	// Bin is the directory whose podium-coordinator Start runs; "" is this
	// tree's (binDir). Setting it while the replica is stopped replaces its
	// build at the next Start (a rolling upgrade).
	Bin string
	t   testing.TB
	db  string
	// Flags are added to `serve`; a Restart uses them again.
	flags []string
	// wrap, when set, is a command the replica is run through, its own
	// path and arguments appended (startReplica).
	wrap []string
	log  *logBuffer
	mu   sync.Mutex
	p    *proc
	id   string
}

// StartReplica starts a replica on a free port against databaseURL (the
// coordinator migrates it at start) with extra serve flags, e.g.
// "--unreachable-after", "5s", and waits until it is ready. It is killed
// when the test ends.
func StartReplica(t testing.TB, databaseURL string, flags ...string) *Replica {
	t.Helper()
	return StartReplicaAt(t, databaseURL, FreeAddr(t), flags...)
}

// StartReplicaAt is StartReplica on a given address (FreeAddr).
func StartReplicaAt(t testing.TB, databaseURL, addr string, flags ...string) *Replica {
	t.Helper()
	return StartReplicaFrom(t, "", databaseURL, addr, flags...)
}

// StartReplicaFrom is StartReplicaAt with the podium-coordinator in bin (""
// for binDir): its Bin.
func StartReplicaFrom(t testing.TB, bin, databaseURL, addr string, flags ...string) *Replica {
	t.Helper()
	return startReplica(t, bin, databaseURL, addr, nil, flags)
}

// startReplica is StartReplicaFrom with the replica run through wrap, if set.
func startReplica(t testing.TB, bin, databaseURL, addr string, wrap, flags []string) *Replica {
	t.Helper()
	r := &Replica{Addr: addr, Bin: bin, t: t, db: databaseURL, flags: flags, wrap: wrap, log: &logBuffer{}}
	t.Cleanup(func() {
		// A replica that crashed fails the test even if nothing the test
		// waited for noticed: a panic is a bug whatever else went right.
		crashed := r.crashed()
		r.Kill()
		if crashed != "" {
			t.Errorf("replica %s exited on its own %s; the end of its log:\n%s", r.Addr, crashed, lastLines(r.log.String(), 40))
		}
		if t.Failed() {
			t.Logf("replica %s log:\n%s", r.Addr, r.log.String())
		}
	})
	r.Start()
	return r
}

// crashed says how the running replica process ended if it exited without
// the harness asking, and "" otherwise.
func (r *Replica) crashed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return ""
	}
	return r.p.diedOnItsOwn()
}

// failIfCrashed ends the test at once, with the end of the replica's log,
// if the replica exited on its own: whatever a test waits for from it then
// never comes, and the reason is in that log, not in the wait's timeout.
func (r *Replica) failIfCrashed(t testing.TB) {
	t.Helper()
	if how := r.crashed(); how != "" {
		t.Fatalf("replica %s exited on its own %s; the end of its log:\n%s", r.Addr, how, lastLines(r.log.String(), 40))
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// URL is "http://" and Addr.
func (r *Replica) URL() string { return "http://" + r.Addr }

// Log is everything the replica has logged, across restarts.
func (r *Replica) Log() string { return r.log.String() }

// Start starts the replica process (again) on its address and waits until
// it answers /readyz 200.
func (r *Replica) Start() {
	r.t.Helper()
	r.mu.Lock()
	if r.p != nil {
		r.mu.Unlock()
		r.t.Fatalf("replica %s is already running", r.Addr)
	}
	fmt.Fprintf(r.log, "=== harness: start replica %s %v from %s\n", r.Addr, r.flags, binOr(r.Bin))
	from := len(r.log.Bytes())
	argv := append([]string{filepath.Join(binOr(r.Bin), "podium-coordinator"), "serve", "--listen", r.Addr}, r.flags...)
	argv = append(slices.Clone(r.wrap), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PODIUM_DATABASE_URL="+r.db, "PODIUM_TOKEN="+coordtest.Token)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	r.p = startProc(r.t, cmd)
	r.mu.Unlock()
	r.WaitReady()
	var id string
	wait.For(r.t, readyWithin, "replica "+r.Addr+" to log its id", func() bool {
		m := servingRe.FindSubmatch(r.log.Bytes()[from:])
		if m != nil {
			id = string(m[1])
		}
		return m != nil
	})
	r.mu.Lock()
	r.id = id
	r.mu.Unlock()
}

var servingRe = regexp.MustCompile(`msg="coordinator serving" replica=(\S+)`)

// ID is the replica id of the running process (a fresh one at each Start
// unless the flags give --replica-id): what a node's Replica field names.
func (r *Replica) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// WaitReady waits until the replica answers /readyz with 200.
func (r *Replica) WaitReady() {
	r.t.Helper()
	wait.For(r.t, readyWithin, "replica "+r.Addr+" to answer /readyz 200", func() bool {
		r.failIfCrashed(r.t)
		resp, err := http.Get(r.URL() + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Kill SIGKILLs the replica, as a crash would, and waits for it to exit.
func (r *Replica) Kill() { r.end(true) }

// Stop SIGTERMs the replica (a graceful stop) and waits for it to exit.
func (r *Replica) Stop() { r.end(false) }

func (r *Replica) end(kill bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return
	}
	if kill {
		fmt.Fprintf(r.log, "=== harness: SIGKILL replica %s\n", r.Addr)
		r.p.kill()
	} else {
		fmt.Fprintf(r.log, "=== harness: SIGTERM replica %s\n", r.Addr)
		r.p.stop()
	}
	r.p = nil
}

// Restart stops the replica gracefully and starts it again on the same
// address and flags.
func (r *Replica) Restart() {
	r.t.Helper()
	r.Stop()
	r.Start()
}

// Admin is an AdminService client for the replica, with the test token.
func (r *Replica) Admin() podiumv1connect.AdminServiceClient {
	return coordtest.AdminClient(coordtest.HTTPClient(), r.URL())
}

// Tasks is a TaskService client for the replica, with the test token.
func (r *Replica) Tasks() podiumv1connect.TaskServiceClient {
	return coordtest.TaskClient(coordtest.HTTPClient(), r.URL())
}

// Node is the node as the replica lists it, or nil (with the error) if it
// cannot say.
func (r *Replica) Node(id string) (*podiumv1.Node, error) {
	res, err := r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		return nil, err
	}
	for _, n := range res.Msg.Nodes {
		if n.Id == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("node %s is not listed", id)
}

// WaitNode waits until the replica lists the node with the status (and,
// for online, a replica holding its stream).
func (r *Replica) WaitNode(t testing.TB, id string, want podiumv1.NodeStatus) {
	t.Helper()
	wait.For(t, nodeWithin, "node "+id+" to be "+want.String()+" at "+r.Addr, func() bool {
		r.failIfCrashed(t)
		n, err := r.Node(id)
		return err == nil && n.Status == want && (want != podiumv1.NodeStatus_NODE_STATUS_ONLINE || n.Replica != "")
	})
}

// WaitOnlineOn waits until the replica lists the node online with its
// stream held by this very replica.
func (r *Replica) WaitOnlineOn(t testing.TB, id string) {
	t.Helper()
	wait.For(t, nodeWithin, "node "+id+" to be online on replica "+r.Addr, func() bool {
		r.failIfCrashed(t)
		n, err := r.Node(id)
		return err == nil && n.Status == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.Replica == r.ID()
	})
}

// Task is the task as the replica has it.
func (r *Replica) Task(t testing.TB, id string) *podiumv1.Task {
	t.Helper()
	res, err := r.Tasks().Get(context.Background(), connect.NewRequest(&podiumv1.GetRequest{Id: id}))
	if err != nil {
		r.failIfCrashed(t)
		t.Fatalf("get task %s from %s: %v", id, r.Addr, err)
	}
	return res.Msg.Task
}

// StoredOutput is the output stored for the task, each stream's log chunks
// concatenated, as the API returns it (not following).
func (r *Replica) StoredOutput(t testing.TB, id string) (stdout, stderr []byte) {
	t.Helper()
	stream, err := r.Tasks().Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	defer stream.Close()
	var out, errb bytes.Buffer
	for stream.Receive() {
		l := stream.Msg().GetEvent().GetLog()
		if l == nil {
			continue
		}
		if l.GetStream() == podiumv1.LogStream_LOG_STREAM_STDERR {
			errb.Write(l.GetData())
		} else {
			out.Write(l.GetData())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	return out.Bytes(), errb.Bytes()
}

// Agent is a `podium-agent` enrolled as a node, run as its own process.
// Its log is printed if the test fails.
type Agent struct {
	// Node is the node id enrollment gave it.
	Node string
	// DataDir is its --data-dir, kept across restarts.
	DataDir string
	// Bin is the directory whose podium-agent Start runs; "" is this tree's
	// (binDir). Setting it while the agent is stopped replaces its build at
	// the next Start.
	Bin string
	// Args are added to every `podium-agent run` (e.g. "--coordinator",
	// URL); Env to its environment (e.g. "DOCKER_HOST=unix:///..." for a
	// private engine). Set them before Start. Wrap, when set, is a command
	// the agent is run through, its own path and arguments appended (e.g.
	// "prlimit", "--nofile=64:64").
	Args []string
	Env  []string
	Wrap []string
	t    testing.TB
	log  *logBuffer
	mu   sync.Mutex
	p    *proc
}

// EnrollAgent makes an enrollment token at r and enrolls a new node with
// it against url (r.URL(), or a proxy in front of r), with extra enroll
// flags. The agent is not running yet: set Args/Env, then Start. When the
// test ends the agent is stopped, and if the test failed its log is
// printed and whatever its node left in the engine is removed.
func EnrollAgent(t testing.TB, r *Replica, url string, enrollArgs ...string) *Agent {
	t.Helper()
	return EnrollAgentFrom(t, "", r, url, enrollArgs...)
}

// EnrollAgentFrom is EnrollAgent with the podium-agent in bin ("" for
// binDir), which the returned agent also runs (its Bin).
func EnrollAgentFrom(t testing.TB, bin string, r *Replica, url string, enrollArgs ...string) *Agent {
	t.Helper()
	tok, err := r.Admin().CreateEnrollmentToken(context.Background(), connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatalf("create an enrollment token at %s: %v", r.Addr, err)
	}
	a := &Agent{DataDir: t.TempDir(), Bin: bin, t: t, log: &logBuffer{}}
	cmd := exec.Command(filepath.Join(binOr(bin), "podium-agent"), append([]string{"enroll", "--coordinator", url,
		"--token", tok.Msg.Token, "--data-dir", a.DataDir}, enrollArgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("podium-agent enroll: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	a.Node = strings.TrimSpace(lines[len(lines)-1])
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("agent %s log:\n%s", a.Node, a.log.String())
			dockertest.RemoveAllFor(dockertest.Client(t), "podium.node="+a.Node)
		}
	})
	return a
}

// Log is everything the agent has logged, across restarts.
func (a *Agent) Log() string { return a.log.String() }

// Start runs `podium-agent run --data-dir DIR --max-tasks 4 Args...`; it
// does not wait for the node to come online (Replica.WaitNode does).
func (a *Agent) Start() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p != nil {
		a.t.Fatalf("agent %s is already running", a.Node)
	}
	fmt.Fprintf(a.log, "=== harness: start agent %v from %s\n", a.Args, binOr(a.Bin))
	// No warm network pool (see test/e2e's startAgent): the engine's 31
	// address pools are shared by every agent the suites run at once.
	argv := append([]string{filepath.Join(binOr(a.Bin), "podium-agent"), "run", "--data-dir", a.DataDir, "--max-tasks", "4", "--network-pool", "0"}, a.Args...)
	argv = append(slices.Clone(a.Wrap), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), a.Env...)
	cmd.Stdout, cmd.Stderr = a.log, a.log
	a.p = startProc(a.t, cmd)
}

// Stop SIGTERMs the agent and waits for it (tasks keep running, by design).
func (a *Agent) Stop() { a.end(false) }

// Kill SIGKILLs the agent, a crash, and waits for it.
func (a *Agent) Kill() { a.end(true) }

func (a *Agent) end(kill bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return
	}
	if kill {
		fmt.Fprintln(a.log, "=== harness: SIGKILL agent")
		a.p.kill()
	} else {
		fmt.Fprintln(a.log, "=== harness: SIGTERM agent")
		a.p.stop()
	}
	a.p = nil
}

// Freeze stops the agent process (SIGSTOP), as a hung process is: its
// connections stay open and nothing it runs is told. Thaw resumes it; a test
// that froze an agent thaws it when it ends, so that Stop can reach it.
func (a *Agent) Freeze() {
	a.t.Helper()
	a.signal(syscall.SIGSTOP, "SIGSTOP (freeze)")
	a.t.Cleanup(a.Thaw)
}

// Thaw resumes a frozen agent (SIGCONT); resuming one that runs is harmless.
func (a *Agent) Thaw() { a.signal(syscall.SIGCONT, "SIGCONT (thaw)") }

func (a *Agent) signal(sig syscall.Signal, what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return
	}
	fmt.Fprintf(a.log, "=== harness: %s agent\n", what)
	if err := a.p.cmd.Process.Signal(sig); err != nil {
		a.t.Errorf("%s agent %s: %v", what, a.Node, err)
	}
}

// Restart stops the agent gracefully and starts it again.
func (a *Agent) Restart() {
	a.t.Helper()
	a.Stop()
	a.Start()
}

// Run is a `podium run` (or any podium command) in progress.
type Run struct {
	p              *proc
	stdout, stderr *logBuffer
}

// StartRun starts `podium --server S1,S2,... run ARGS...` with the test
// token; it is killed if still running when the test ends.
func StartRun(t testing.TB, servers []string, args ...string) *Run {
	t.Helper()
	return StartPodium(t, servers, append([]string{"run"}, args...)...)
}

// StartPodium starts `podium --server S1,S2,... ARGS...` with the test token.
func StartPodium(t testing.TB, servers []string, args ...string) *Run {
	t.Helper()
	return StartPodiumFrom(t, "", servers, args...)
}

// StartPodiumFrom is StartPodium with the podium CLI in bin ("" for binDir).
func StartPodiumFrom(t testing.TB, bin string, servers []string, args ...string) *Run {
	t.Helper()
	cmd := exec.Command(filepath.Join(binOr(bin), "podium"), append([]string{"--server", strings.Join(servers, ",")}, args...)...)
	cmd.Env = append(os.Environ(), "PODIUM_TOKEN="+coordtest.Token)
	r := &Run{stdout: &logBuffer{}, stderr: &logBuffer{}}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	r.p = startProc(t, cmd)
	t.Cleanup(func() {
		select {
		case <-r.p.done:
		default:
			r.p.kill()
			t.Logf("podium %v was still running at the end; stderr:\n%s", args, r.stderr.String())
		}
	})
	return r
}

// binOr is bin, or binDir when bin is "".
func binOr(bin string) string {
	if bin == "" {
		return binDir
	}
	return bin
}

// Stdout is what the command has printed on stdout so far.
func (r *Run) Stdout() []byte { return r.stdout.Bytes() }

// Stderr is what the command has printed on stderr so far.
func (r *Run) Stderr() string { return r.stderr.String() }

// WaitStdout waits until stdout contains s.
func (r *Run) WaitStdout(t testing.TB, s string) {
	t.Helper()
	exited := false
	wait.For(t, runWithin, fmt.Sprintf("%q on podium's stdout", s), func() bool {
		select {
		case <-r.p.done:
			exited = true
		default:
		}
		return exited || bytes.Contains(r.stdout.Bytes(), []byte(s))
	})
	// It may have printed it just before it exited.
	if !bytes.Contains(r.stdout.Bytes(), []byte(s)) {
		t.Fatalf("podium exited (code %d) without printing %q; stderr:\n%s", r.p.cmd.ProcessState.ExitCode(), s, r.Stderr())
	}
}

// Wait waits for the command to exit and returns its exit code.
func (r *Run) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-r.p.done:
	case <-time.After(runWithin):
		t.Fatalf("podium did not exit within %s; stderr:\n%s", runWithin, r.Stderr())
	}
	return r.p.cmd.ProcessState.ExitCode()
}

var taskIDRe = regexp.MustCompile(`task_[0-9A-Z]{26}`)

// TaskID is the task id `podium run` announced on stderr, waited for.
func (r *Run) TaskID(t testing.TB) string {
	t.Helper()
	var id string
	wait.For(t, runWithin, "podium run to print the task id", func() bool {
		id = taskIDRe.FindString(r.Stderr())
		return id != ""
	})
	return id
}

// Workload is the standard task of the suite: it prints Lines lines, one
// every Every, through tee into a file, then the sha256 of that file (the
// task's own checksum of what it printed) as a last line "sha256 HEX", and
// exits Code.
type Workload struct {
	Lines int
	Every time.Duration
	Code  int
}

// Line is the i-th line the workload prints, from 1, newline included:
// what WaitStdout waits for to know the task is under way.
func (w Workload) Line(i int) string { return fmt.Sprintf("line %d of %d\n", i, w.Lines) }

// Script is the workload's `sh -c` script (busybox: seq, tee, sha256sum).
func (w Workload) Script() string {
	return fmt.Sprintf(`mkdir -p /tmp && for i in $(seq 1 %[1]d); do echo "line $i of %[1]d"; sleep %[2]g; done | tee /tmp/podium-workload.out && `+
		`echo "sha256 $(sha256sum < /tmp/podium-workload.out | cut -c1-64)"; exit %[3]d`,
		w.Lines, w.Every.Seconds(), w.Code)
}

// Args are `podium run` arguments that run the workload in the test image.
func (w Workload) Args(t testing.TB) []string {
	t.Helper()
	return []string{"--image", dockertest.EnsureImage(t), "--", "sh", "-c", w.Script()}
}

// want is what the workload prints before its checksum line.
func (w Workload) want() []byte {
	var b bytes.Buffer
	for i := 1; i <= w.Lines; i++ {
		b.WriteString(w.Line(i))
	}
	return b.Bytes()
}

// Check checks, once run has exited, what a user sees of a workload that
// ran through a fault: podium run exited with the task's code; its stdout is
// every line once, in order, followed by the task's own sha256 of those
// bytes; the output stored at r (through the API) is byte-exact the same;
// and the task ended with its own status and code. It returns the task.
func (w Workload) Check(t testing.TB, r *Replica, run *Run) *podiumv1.Task {
	t.Helper()
	id := run.TaskID(t)
	code := run.Wait(t)
	out := run.Stdout()
	if code != w.Code {
		t.Errorf("podium run exited %d, want the task's own %d; stderr:\n%s", code, w.Code, run.Stderr())
	}
	body, sum, ok := splitChecksum(out)
	if !ok {
		t.Fatalf("podium run's stdout does not end with the task's checksum line; stdout:\n%s\nstderr:\n%s", out, run.Stderr())
	}
	if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
		t.Errorf("podium run printed %d bytes before the checksum line, whose sha256 is %x; the task printed bytes with sha256 %s", len(body), got, sum)
	}
	if !bytes.Equal(body, w.want()) {
		t.Errorf("podium run printed, before the checksum line:\n%s\nwant lines 1..%d once each, in order", body, w.Lines)
	}
	stored, _ := r.StoredOutput(t, id)
	if !bytes.Equal(stored, out) {
		t.Errorf("the stored stdout (%d bytes) differs from what podium run printed (%d bytes):\nstored:\n%s\nprinted:\n%s", len(stored), len(out), stored, out)
	}
	tk := r.Task(t, id)
	wantState := podiumv1.TaskState_TASK_STATE_SUCCEEDED
	if w.Code != 0 {
		wantState = podiumv1.TaskState_TASK_STATE_FAILED
	}
	if tk.State != wantState || tk.ExitCode == nil || tk.GetExitCode() != int32(w.Code) {
		t.Errorf("task %s ended %s (%q) with exit code %v, want %s with its own %d", id, tk.State, tk.Reason, tk.ExitCode, wantState, w.Code)
	}
	return tk
}

// splitChecksum splits stdout into what precedes its last line and the
// hex of a last line "sha256 HEX".
func splitChecksum(out []byte) (body []byte, sum string, ok bool) {
	trimmed := bytes.TrimSuffix(out, []byte("\n"))
	i := bytes.LastIndexByte(trimmed, '\n')
	last := trimmed[i+1:]
	hexs, found := bytes.CutPrefix(last, []byte("sha256 "))
	if !found || len(hexs) != 64 || len(out) == len(trimmed) {
		return nil, "", false
	}
	return out[:i+1], string(hexs), true
}

// NothingLeft waits until nothing labelled with the node (containers,
// networks, volumes) is left in the local engine; teardown follows a task's
// end, so it may take a moment.
func NothingLeft(t testing.TB, node string) {
	t.Helper()
	NothingLeftIn(t, dockertest.Client(t), node)
}

// NothingLeftIn is NothingLeft in the engine c (a private one).
func NothingLeftIn(t testing.TB, c *client.Client, node string) {
	t.Helper()
	label := "podium.node=" + node
	var left []string
	var lastErr error
	deadline := time.Now().Add(nodeWithin)
	for {
		left, lastErr = dockertest.LeftFor(context.Background(), c, label)
		if lastErr == nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(wait.Poll * 10)
	}
	if lastErr != nil {
		t.Fatalf("list what is labelled %s in Docker: %v", label, lastErr)
	}
	t.Fatalf("after %s, still in Docker:\n%s", nodeWithin, strings.Join(left, "\n"))
}
