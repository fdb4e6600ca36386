package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// buildCoordinator builds podium-coordinator the way `make build` does, so a
// plain `go run` of the benchmark measures the code in the working tree.
func buildCoordinator(ctx context.Context, dir string) (string, error) {
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

// coordinator is a podium-coordinator subprocess. Running the real binary,
// rather than the server package inside this process, is what lets its CPU
// and RSS be read on their own from /proc.
type coordinator struct {
	cmd     *exec.Cmd
	pid     int
	url     string
	logPath string
	logFile *os.File
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed
}

func startCoordinator(ctx context.Context, bin, dbURL, dir string, interval time.Duration, n int) (*coordinator, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("coordinator-%d.log", n))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "serve", "--database", dbURL, "--listen", addr, "--token", "x",
		"--heartbeat-interval", interval.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so ^C reaches only the benchmark, which then
	// stops the fleet and the coordinator in order. Pdeathsig kills it should
	// the benchmark itself die without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &coordinator{cmd: cmd, pid: cmd.Process.Pid, url: "http://" + addr, logPath: logPath, logFile: logf, exited: make(chan struct{})}
	go func() { c.waitErr = cmd.Wait(); close(c.exited) }()
	if err := c.waitReady(ctx, 30*time.Second); err != nil {
		_ = c.stop(5 * time.Second)
		return nil, err
	}
	return c, nil
}

// freePort asks the kernel for a free loopback port. Another process could take
// it before the coordinator binds it; on a benchmark machine that does not
// happen, and the coordinator would then fail loudly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *coordinator) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for {
		res, err := client.Get(c.url + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the coordinator was not ready within %s; see %s", within, c.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
			return fmt.Errorf("the coordinator exited at start: %v\n%s", c.waitErr, tail(c.logPath, 20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks the coordinator to shut down (SIGTERM: it ends its sessions and
// releases its leases) and kills it if it has not within timeout.
func (c *coordinator) stop(timeout time.Duration) error {
	defer c.logFile.Close()
	select {
	case <-c.exited:
		return c.waitErr
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return c.waitErr
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return errors.New("killed after not stopping within " + timeout.String())
	}
}

// warnings counts WARN and ERROR lines in the coordinator's log so far and
// returns a few distinct ones: a replica struggling under load says so there.
func (c *coordinator) warnings() (int, []string) {
	f, err := os.Open(c.logPath)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	count := 0
	seen := map[string]bool{}
	var sample []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		count++
		_, msg, _ := strings.Cut(line, "msg=")
		key := msg
		if len(key) > 60 {
			key = key[:60]
		}
		if !seen[key] && len(sample) < 5 {
			seen[key] = true
			if len(msg) > 200 {
				msg = msg[:200] + "…"
			}
			sample = append(sample, msg)
		}
	}
	return count, sample
}

func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
