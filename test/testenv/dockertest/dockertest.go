// Package dockertest gives tests the real local Docker engine and a small image
// to run in it. No registry is reachable on the machines Podium is built on, so
// the image is built locally FROM scratch with Debian's busybox-static binary.
// Production code never imports this package.
package dockertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// Image is the test image's reference: busybox's applets on PATH, sh as CMD.
const Image = "podium-test/busybox:local"

// BusyboxPath is where Debian's busybox-static installs its binary.
const BusyboxPath = "/bin/busybox"

var (
	once     sync.Once
	buildErr error
)

// Client connects to the local engine, negotiating the API version so Debian's
// Docker 20.10 (API 1.41) works with the v28 client. A missing engine fails the
// test with how to get one.
func Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("dockertest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("dockertest: no Docker engine answers (%v): install and start one with "+
			"`apt-get install docker.io && dockerd &` (.ci/run does this)", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// EnsureImage builds the test image once per test binary and returns its name.
func EnsureImage(t testing.TB) string {
	t.Helper()
	Client(t)
	once.Do(func() { buildErr = Build(context.Background(), Image) })
	if buildErr != nil {
		t.Fatalf("dockertest: %v", buildErr)
	}
	return Image
}

// Build builds a busybox image named tag from nothing but the local busybox
// binary. The demo uses it too.
func Build(ctx context.Context, tag string) error { return build(ctx, "", tag) }

// build is Build in the engine at host (a DOCKER_HOST value; "" is the
// environment's).
func build(ctx context.Context, host, tag string) error {
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return fmt.Errorf("read %s (install Debian's busybox-static): %w", BusyboxPath, err)
	}
	dir, err := os.MkdirTemp("", "podium-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "busybox"), bb, 0o755); err != nil {
		return err
	}
	dockerfile := "FROM scratch\nCOPY busybox /bin/busybox\n" +
		"RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n" +
		"ENV PATH=/bin\nCMD [\"sh\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, dir)
	if host != "" {
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker build %s: %v\n%s", tag, err, out.String())
	}
	return nil
}

// LabelKey is the Docker label every Podium object carries.
const LabelKey = "podium.task"

// poolLabel marks a network of an agent's warm pool (executor.LabelPool).
const poolLabel = "podium.pool"

// AssertNothingLeft fails the test if any container, network or volume labelled
// by Podium is still in the engine.
func AssertNothingLeft(t testing.TB, c *client.Client) {
	t.Helper()
	AssertNothingLeftFor(t, c, LabelKey)
}

// AssertNothingLeftFor fails the test if any container, network or volume
// matching the label filter is still in the engine: "podium.node=ID" scopes
// the check to one test's node. `go test ./...` runs packages that start
// containers at the same time, and an engine-wide check would see the other
// packages' running tasks.
func AssertNothingLeftFor(t testing.TB, c *client.Client, label string) {
	t.Helper()
	left, err := LeftFor(context.Background(), c, label)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Error(l)
	}
}

// LeftFor describes each container, network and volume matching the label
// filter that is still in the engine, one line each; none is an empty list.
// A network of an agent's warm pool that no container uses is not counted.
// A test that waits for a teardown polls it (AssertNothingLeftFor fails at
// once).
func LeftFor(ctx context.Context, c *client.Client, label string) ([]string, error) {
	f := filters.NewArgs(filters.Arg("label", label))
	var left []string
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	for _, ct := range cs {
		left = append(left, fmt.Sprintf("container %s (%v, %s) labelled %s is still there", ct.ID[:12], ct.Names, ct.State, label))
	}
	nets, err := c.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, n := range nets {
		if _, pool := n.Labels[poolLabel]; pool {
			// A running agent keeps networks ready for its next tasks
			// (its --network-pool): one no container uses is the
			// agent's, not a task's leftover. The agent removes them as
			// it stops.
			info, err := c.NetworkInspect(ctx, n.ID, network.InspectOptions{})
			if err == nil && len(info.Containers) == 0 {
				continue
			}
		}
		left = append(left, fmt.Sprintf("network %s labelled %s is still there", n.Name, label))
	}
	vols, err := c.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, v := range vols.Volumes {
		left = append(left, fmt.Sprintf("volume %s labelled %s is still there", v.Name, label))
	}
	return left, nil
}

// RemoveAllFor removes, best effort, every container, network and volume
// matching the label filter: what a failed test left of its node, so that
// one failure does not hold Docker networks and memory for the tests after
// it.
func RemoveAllFor(c *client.Client, label string) {
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", label))
	cs, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	for _, ct := range cs {
		_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
	}
	nets, _ := c.NetworkList(ctx, network.ListOptions{Filters: f})
	for _, n := range nets {
		_ = c.NetworkRemove(ctx, n.ID)
	}
	vols, _ := c.VolumeList(ctx, volume.ListOptions{Filters: f})
	for _, v := range vols.Volumes {
		_ = c.VolumeRemove(ctx, v.Name, true)
	}
}
