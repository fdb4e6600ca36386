// Package benchkit holds what Podium's benchmark programs share, so each
// program keeps only what it measures: a podium-coordinator run as a
// subprocess (so its CPU and RSS can be read on their own, from /proc), a
// simulated fleet speaking the real node protocol (Fleet; each program's Node
// says what its nodes do with tasks), the flags and setup of a fleet
// benchmark (FleetFlags, Start), a database with pg_stat_statements (StatsDB)
// and the pgbench reference run beside every figure (Pgbench).
//
// It sits under bench, not beside production code: like a test, it
// starts a throwaway Postgres from test/testenv.
package benchkit

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	*Process
	URL string
	// TLS is what a client trusts the coordinator with when it serves
	// HTTPS (URL is https://); nil when it serves plain HTTP.
	TLS *tls.Config
}

// APIToken is the bearer token benchmark coordinators accept: as long as the
// coordinator requires (32 bytes).
const APIToken = "bench-token-0123456789abcdef0123456789abcdef"

// StartCoordinator runs `podium-coordinator serve` on a free loopback port
// with the API token APIToken, logging to logPath, with extra flags and
// environment, and waits until it is ready.
func StartCoordinator(ctx context.Context, bin, dbURL, logPath string, env []string, extra ...string) (*Coordinator, error) {
	return StartCoordinatorTLS(ctx, bin, dbURL, logPath, nil, env, extra...)
}

// StartCoordinatorTLS is StartCoordinator serving HTTPS with tlsf's
// certificate (plain HTTP when tlsf is nil).
func StartCoordinatorTLS(ctx context.Context, bin, dbURL, logPath string, tlsf *TLSFiles, env []string, extra ...string) (*Coordinator, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", "--database", dbURL, "--listen", addr, "--token", APIToken}
	c := &Coordinator{URL: "http://" + addr}
	if tlsf != nil {
		args = append(args, tlsf.Args()...)
		c.URL, c.TLS = "https://"+addr, tlsf.Client
	}
	p, err := StartProcess(logPath, env, bin, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	c.Process = p
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
	client := &http.Client{Timeout: time.Second}
	if c.TLS != nil {
		// HTTP/1.1 for a probe: a Transport given its own TLS config speaks
		// only what that config's NextProtos offer.
		cfg := c.TLS.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		client.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return waitReady(ctx, client, c.URL, c.LogPath, c.Exited, func() error { return c.WaitErr }, within)
}

// Shutdown stops the coordinator, giving it 30 s to end its sessions, and
// logs how long that took: a slow or unclean stop is a finding too.
func (c *Coordinator) Shutdown(log *slog.Logger) {
	began := time.Now()
	if err := c.Stop(30 * time.Second); err != nil {
		log.Warn("coordinator did not stop cleanly", "err", err)
	}
	log.Info("coordinator stopped", "took", time.Since(began).Round(time.Millisecond))
}

// Warnings counts WARN and ERROR lines in the coordinator's log so far and
// returns a few distinct ones.
func (c *Coordinator) Warnings() (int, []string) { return c.Process.Warnings(5) }

// Tail returns the last lines of a file.
func Tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
