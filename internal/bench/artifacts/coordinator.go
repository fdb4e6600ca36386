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

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/internal/pgtest"
	"github.com/podiumhq/podium/internal/s3test"
)

const (
	dbName = "bench"
	token  = "bench-token"
	bucket = "podium-artifacts"
)

func createDatabase(ctx context.Context, c *pgtest.Cluster) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create database "+dbName+" template podium_template"); err != nil {
		return "", fmt.Errorf("create the benchmark's database: %w", err)
	}
	return c.URL(dbName), nil
}

// coordinator is a podium-coordinator subprocess. Running the real binary is
// what lets its memory be read on its own from /proc.
type coordinator struct {
	cmd     *exec.Cmd
	pid     int
	url     string
	logPath string
	logFile *os.File
	exited  chan struct{}
	waitErr error // valid after exited is closed
}

func startCoordinator(ctx context.Context, bin, dbURL string, s3 *s3test.Server, dir string) (*coordinator, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logPath := filepath.Join(dir, "coordinator.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--database", dbURL, "--listen", addr, "--token", token,
		"--s3-endpoint", s3.Endpoint, "--s3-tls=false", "--s3-bucket", bucket,
		"--s3-access-key", s3.AccessKey, "--s3-max-artifact-size", "64GiB")
	cmd.Env = append(os.Environ(), "PODIUM_S3_SECRET_KEY="+s3.SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so ^C reaches only the benchmark, which stops it
	// in order; Pdeathsig kills it should the benchmark die without cleaning up.
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

// waitReady waits for /readyz, which includes the object store answering and
// the bucket existing.
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

// stop shuts the coordinator down with SIGTERM and kills it if it has not
// stopped within timeout.
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

// warnings counts the WARN and ERROR lines in the coordinator's log and
// returns a few.
func (c *coordinator) warnings() (int, []string) {
	f, err := os.Open(c.logPath)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	n := 0
	var sample []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			n++
			if len(sample) < 3 {
				sample = append(sample, line)
			}
		}
	}
	return n, sample
}

// memInfo is a process's resident memory now (VmRSS) and at its peak since
// it started (VmHWM), in bytes.
type memInfo struct{ rss, hwm int64 }

func procMem(pid int) (memInfo, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memInfo{}, err
	}
	defer f.Close()
	var m memInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			m.rss = kib << 10
		case "VmHWM":
			m.hwm = kib << 10
		}
	}
	return m, sc.Err()
}

// resetPeak makes the kernel's VmHWM start again from the current RSS
// (writing 5 to /proc/<pid>/clear_refs), so each round's peak is its own.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
