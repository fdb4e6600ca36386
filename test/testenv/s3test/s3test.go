// Package s3test runs a real S3-compatible server for tests and benchmarks:
// versitygw, serving a temporary directory on a loopback port. minio-go talks
// to it exactly as to MinIO, so the artifact code is tested against the same
// protocol it meets in production, multipart uploads and presigned URLs
// included. Production code never imports this package.
//
// versitygw must be installed; it is not installed from inside a test (that
// takes a minute and a network), and a machine without it fails loudly with
// the command that installs it. .ci/run installs it (scripts/ensure-s3.sh).
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// InstallCommand installs the versitygw this package runs.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Credentials every test server accepts.
const (
	AccessKey = "podiumtest"
	SecretKey = "podiumtestsecret"
)

// Binary finds versitygw in PATH or in the Go bin directory ($GOBIN, else
// $(go env GOPATH)/bin), where `go install` puts it.
func Binary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(lines) == 2 {
			if lines[0] != "" {
				dirs = append(dirs, lines[0])
			}
			for _, gp := range filepath.SplitList(lines[1]) {
				dirs = append(dirs, filepath.Join(gp, "bin"))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw (an S3-compatible server the artifact tests run against) is not installed: "+
		"install it with `%s` (about 90 s), or run .ci/run, which does", InstallCommand)
}

// Server is one versitygw process serving Dir on Endpoint. Stop and Restart
// keep the directory and the port, so a test can take the object store away
// in the middle of something and bring the same one back.
type Server struct {
	// Endpoint is host:port, plain HTTP.
	Endpoint  string
	AccessKey string
	SecretKey string
	// Dir is the root the posix backend serves: each subdirectory a bucket.
	Dir string

	bin, logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Launch starts versitygw on a free loopback port, serving dir/root and
// logging to dir/versitygw.log. It is for benchmarks and other programs; tests
// use Start.
func Launch(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint: "127.0.0.1:" + strconv.Itoa(port), AccessKey: AccessKey, SecretKey: SecretKey,
		Dir: root, bin: bin, logPath: filepath.Join(dir, "versitygw.log"),
	}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start runs a server in a temporary directory for the test and stops it when
// the test ends. A machine without versitygw fails the test with the command
// that installs it.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch(t.TempDir())
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Endpoint }

// Restart starts the server again after Stop, on the same port and directory,
// and waits until it answers. Starting a running server is a no-op.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", s.Endpoint, "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with its parent, so a crashed test run leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitUp(exited, 30*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		s.cmd = nil
		return err
	}
	return nil
}

// waitUp polls until the server answers HTTP (any status: an unsigned request
// is refused, which is an answer).
func (s *Server) waitUp(exited <-chan struct{}, within time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		res, err := client.Get(s.URL())
		if err == nil {
			res.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw exited at start; its log:\n%s", tail(s.logPath, 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %s; see %s", s.Endpoint, within, s.logPath)
		}
	}
}

// Stop kills the server abruptly, as an outage would, and waits for it to
// exit. Its files stay; Restart brings it back. Stopping a stopped server is a
// no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Client is a minio-go client for the server.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1",
	})
}

// Objects lists every object key in bucket, and every key with a multipart
// upload still open: a test that says "nothing was written" checks both.
func (s *Server) Objects(ctx context.Context, bucket string) (objects, incomplete []string, err error) {
	c, err := s.Client()
	if err != nil {
		return nil, nil, err
	}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return nil, nil, o.Err
		}
		objects = append(objects, o.Key)
	}
	for u := range c.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err != nil {
			return nil, nil, u.Err
		}
		incomplete = append(incomplete, u.Key)
	}
	return objects, incomplete, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
