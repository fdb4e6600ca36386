// Package agenttest holds helpers for the agent's tests. Production code never
// imports it.
package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/test/testenv/dockertest"
)

var nodeSeq atomic.Int64

// NodeID returns a node id no other test, in this process or in another test
// binary running at the same time, uses. Objects carry it in their
// podium.node label, so checks and clean-ups scoped to it cannot touch
// another test's containers.
func NodeID(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("n-%d-%d-%s", os.Getpid(), nodeSeq.Add(1), name)
}

// AssertNoContainers fails the test if any container, network or volume
// labelled with nodeID is still in the engine.
func AssertNoContainers(t testing.TB, c *client.Client, nodeID string) {
	t.Helper()
	dockertest.AssertNothingLeftFor(t, c, "podium.node="+nodeID)
}

var (
	runnerOnce sync.Once
	runnerDir  string
	runnerPath string
	runnerErr  error
)

// Runner builds podium-runner once per test binary and returns its path:
// static and -trimpath, as `make build` does, so the two share the build
// cache.
func Runner(t testing.TB) string {
	t.Helper()
	runnerOnce.Do(func() {
		runnerDir, runnerErr = os.MkdirTemp("", "podium-runner-test-")
		if runnerErr != nil {
			return
		}
		runnerPath = filepath.Join(runnerDir, "podium-runner")
		cmd := exec.Command("go", "build", "-trimpath", "-o", runnerPath, "github.com/podiumhq/podium/cmd/podium-runner")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			runnerErr = fmt.Errorf("build podium-runner: %v\n%s", err, out)
		}
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runnerPath
}

// Main runs a package's tests and removes the runner Runner built. Use it
// from TestMain: os.Exit(agenttest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if runnerDir != "" {
		_ = os.RemoveAll(runnerDir)
	}
	return code
}
