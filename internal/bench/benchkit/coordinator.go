// Package benchkit holds what Podium's benchmark programs share: a
// podium-coordinator run as a subprocess (so its CPU and RSS can be read on
// their own) and readings from /proc.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildCoordinator builds podium-coordinator the way `make build` does, so a
// plain `go run` of the benchmark measures the code in the working tree.
func BuildCoordinator(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("find the module root to build podium-coordinator (run from the repository, or pass -coordinator bin/podium-coordinator): %v", err)
	}
	bin := filepath.Join(dir, "podium-coordinator")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/podium-coordinator")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build podium-coordinator: %v\n%s", err, b)
	}
	return bin, nil
}

// Coordinator is a podium-coordinator subprocess. Running the real binary,
// rather than the server package inside this process, is what lets its CPU
// and RSS be read on their own from /proc.
type Coordinator struct {
	cmd     *exec.Cmd
	PID     int
	URL     string
	LogPath string
	logFile *os.File
	Exited  chan struct{} // closed when the process has exited
	WaitErr error         // valid after Exited is closed
}

// APIToken is the bearer token benchmark coordinators accept.
const APIToken = "x"

// StartCoordinator runs `podium-coordinator serve` on a free loopback port
// with the API token "x", logging to logPath, with extra flags and
// environment, and waits until it is ready.
func StartCoordinator(ctx context.Context, bin, dbURL, logPath string, env []string, extra ...string) (*Coordinator, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"serve", "--database", dbURL, "--listen", addr, "--token", APIToken}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so ^C reaches only the benchmark, which then
	// stops the fleet and the coordinator in order. Pdeathsig kills it should
	// the benchmark itself die without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &Coordinator{cmd: cmd, PID: cmd.Process.Pid, URL: "http://" + addr, LogPath: logPath, logFile: logf, Exited: make(chan struct{})}
	go func() { c.WaitErr = cmd.Wait(); close(c.Exited) }()
	if err := c.WaitReady(ctx, 30*time.Second); err != nil {
		_ = c.Stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

// FreePort asks the kernel for a free loopback port. Another process could take
// it before the coordinator binds it; on a benchmark machine that does not
// happen, and the coordinator would then fail loudly.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitReady polls /readyz until it answers 200.
func (c *Coordinator) WaitReady(ctx context.Context, within time.Duration) error {
	return WaitReady(ctx, c.URL, c.LogPath, c.Exited, func() error { return c.WaitErr }, within)
}

// Stop asks the coordinator to shut down (SIGTERM: it ends its sessions and
// releases its leases) and kills it if it has not within timeout.
func (c *Coordinator) Stop(timeout time.Duration) error {
	defer c.logFile.Close()
	select {
	case <-c.Exited:
		return c.WaitErr
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.Exited:
		return c.WaitErr
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.Exited
		return errors.New("killed after not stopping within " + timeout.String())
	}
}

// Warnings counts WARN and ERROR lines in the coordinator's log so far and
// returns a few distinct ones.
func (c *Coordinator) Warnings() (int, []string) { return LogWarnings(c.LogPath, 5) }

// Tail returns the last lines of a file.
func Tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
