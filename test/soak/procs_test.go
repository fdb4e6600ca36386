package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/netfault"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// Deadlines bound hangs; they measure nothing.
const (
	readyWithin = 90 * time.Second // a replica answering /readyz 200
	stopWithin  = 30 * time.Second // a process ending on SIGTERM before SIGKILL
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

// child is a running process and a channel closed when it has exited.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func spawn(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// end signals the process (SIGKILL, or SIGTERM with SIGKILL after
// stopWithin) and waits for it.
func (c *child) end(kill bool) {
	// A frozen process must run again to act on SIGTERM.
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	if kill {
		_ = c.cmd.Process.Kill()
		<-c.done
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(stopWithin):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// freeAddr is a free "127.0.0.1:PORT".
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitUntil polls cond until it holds or d passes; the error names what
// was waited for. Unlike wait.For it does not end the test, so the
// nemesis and the workload, which run in goroutines of their own, use it.
func waitUntil(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// replica is a `podium-coordinator serve` process on a fixed address. It
// reaches Postgres only through pgLinks (one proxy per cluster, so that it
// alone can be cut off from the database), and nodes reach it only through
// nodeLink, which it advertises.
type replica struct {
	name     string
	addr     string
	dbURL    string
	flags    []string
	pgLinks  []*netfault.Proxy
	nodeLink *netfault.Proxy
	log      *logBuffer

	mu sync.Mutex
	p  *child
}

// url is the replica's own address, for clients (the CLI, the checker).
func (r *replica) url() string { return "http://" + r.addr }

func (r *replica) start() error {
	r.mu.Lock()
	if r.p != nil {
		r.mu.Unlock()
		return nil
	}
	fmt.Fprintf(r.log, "=== soak: start replica %s\n", r.name)
	cmd := exec.Command(filepath.Join(binDir, "podium-coordinator"), append([]string{"serve", "--listen", r.addr,
		"--advertise", r.nodeLink.URL()}, r.flags...)...)
	cmd.Env = append(os.Environ(), "PODIUM_DATABASE_URL="+r.dbURL, "PODIUM_TOKEN="+coordtest.Token,
		"PODIUM_S3_SECRET_KEY="+s3test.SecretKey)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	p, err := spawn(cmd)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.p = p
	r.mu.Unlock()
	return r.waitReady()
}

// waitReady waits until the replica answers /readyz 200.
func (r *replica) waitReady() error {
	return waitUntil(readyWithin, "replica "+r.name+" to answer /readyz 200", func() bool {
		resp, err := http.Get(r.url() + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (r *replica) end(kill bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return
	}
	how := "SIGTERM"
	if kill {
		how = "SIGKILL"
	}
	fmt.Fprintf(r.log, "=== soak: %s replica %s\n", how, r.name)
	r.p.end(kill)
	r.p = nil
}

// crashed is how the replica ended if it exited without being asked.
func (r *replica) crashed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p != nil && r.p.exited()
}

var (
	leadsRe = regexp.MustCompile(`this replica is now the leader`)
	stepsRe = regexp.MustCompile(`no longer the leader|steps down as leader|hands leadership over`)
)

// leads says whether the running replica's log, since it last started,
// says it leads: it logged taking the lead and nothing after that says it
// let go.
func (r *replica) leads() bool {
	r.mu.Lock()
	running := r.p != nil
	r.mu.Unlock()
	if !running {
		return false
	}
	l := r.log.String()
	if i := strings.LastIndex(l, "=== soak: start replica"); i >= 0 {
		l = l[i:]
	}
	took := leadsRe.FindAllStringIndex(l, -1)
	if len(took) == 0 {
		return false
	}
	last := took[len(took)-1][0]
	for _, m := range stepsRe.FindAllStringIndex(l, -1) {
		if m[0] > last {
			return false
		}
	}
	return true
}

// agent is a `podium-agent` process enrolled as a node, with a Docker
// engine of its own and its data directory on a small disk of its own.
type agent struct {
	name    string
	node    string
	dataDir string
	args    []string
	env     []string
	log     *logBuffer

	// gid and mark: see partition_test.go.
	gid  uint32
	mark string

	mu     sync.Mutex
	p      *child
	frozen bool
	cut    bool
}

func (a *agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p != nil {
		return nil
	}
	fmt.Fprintf(a.log, "=== soak: start agent %s\n", a.name)
	cmd := exec.Command(filepath.Join(binDir, "podium-agent"), append([]string{"run", "--data-dir", a.dataDir,
		"--max-tasks", "3", "--network-pool", "0", "--min-free-disk-mb", agentDiskFloorMB}, a.args...)...)
	cmd.Env = append(os.Environ(), a.env...)
	cmd.SysProcAttr = a.credential()
	cmd.Stdout, cmd.Stderr = a.log, a.log
	p, err := spawn(cmd)
	if err != nil {
		return err
	}
	a.p = p
	return nil
}

func (a *agent) end(kill bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return
	}
	how := "SIGTERM"
	if kill {
		how = "SIGKILL"
	}
	fmt.Fprintf(a.log, "=== soak: %s agent %s\n", how, a.name)
	a.p.end(kill)
	a.p = nil
	a.frozen = false
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) the agent process.
func (a *agent) freeze(stop bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return errors.New("agent " + a.name + " is not running")
	}
	sig, what := syscall.SIGCONT, "SIGCONT"
	if stop {
		sig, what = syscall.SIGSTOP, "SIGSTOP"
	}
	fmt.Fprintf(a.log, "=== soak: %s agent %s\n", what, a.name)
	a.frozen = stop
	return a.p.cmd.Process.Signal(sig)
}

func (a *agent) crashed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.p != nil && a.p.exited()
}

// podiumCLI runs `podium --server S1,S2,S3 ARGS...` with the test token.
func podiumCLI(ctx context.Context, servers []string, args ...string) (stdout, stderr []byte, code int, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "podium"), append([]string{"--server", strings.Join(servers, ",")}, args...)...)
	cmd.Env = append(os.Environ(), "PODIUM_TOKEN="+coordtest.Token)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err == nil {
		return o.Bytes(), e.Bytes(), 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.Bytes(), e.Bytes(), ee.ExitCode(), nil
	}
	return o.Bytes(), e.Bytes(), -1, err
}
