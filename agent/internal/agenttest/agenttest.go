// Package agenttest holds helpers for the agent's tests. Production code never
// imports it.
package agenttest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

var nodeSeq atomic.Int64

// NodeID returns a node id no other test, in this process or in another test
// binary running at the same time, uses. Containers carry it in their
// podium.node label, so checks and clean-ups scoped to it cannot touch
// another test's containers.
func NodeID(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("n-%d-%d-%s", os.Getpid(), nodeSeq.Add(1), name)
}

// AssertNoContainers fails the test if any container labelled with nodeID is
// still in the engine. It is dockertest.AssertNothingLeft scoped to one node:
// `go test ./...` runs the packages that start containers at the same time,
// and an engine-wide check would see the other packages' running tasks.
func AssertNoContainers(t testing.TB, c *client.Client, nodeID string) {
	t.Helper()
	list, err := c.ContainerList(context.Background(), container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", "podium.node="+nodeID)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range list {
		t.Errorf("container %s (%v) of node %s is still there", ct.ID[:12], ct.Names, nodeID)
	}
}
