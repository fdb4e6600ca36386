package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/identity"
	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// waitOnlineOn waits until r reports the node online on the replica r itself.
func (e *env) waitOnlineOn(r *coordtest.Replica) {
	e.t.Helper()
	coordtest.Eventually(e.t, 60*time.Second, "the node to be online on replica "+r.ReplicaID(), func() bool {
		res, err := r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		return slices.ContainsFunc(res.Msg.Nodes, func(n *podiumv1.Node) bool {
			return n.Id == e.node && n.Status == podiumv1.NodeStatus_NODE_STATUS_ONLINE && n.Replica == r.ReplicaID()
		})
	})
}

// waitKeptReplica waits until the agent's kept replica list names r.
func (e *env) waitKeptReplica(r *coordtest.Replica) {
	e.t.Helper()
	coordtest.Eventually(e.t, 60*time.Second, "the agent to keep replica "+r.Addr()+" in its data directory", func() bool {
		kept, err := identity.LoadReplicas(e.data)
		return err == nil && slices.ContainsFunc(kept, func(u string) bool { return strings.Contains(u, r.Addr()) })
	})
}

// The agent keeps the replicas it is told of on disk and tries them in turn:
// restarted while the replica it enrolled with is down, it comes online on
// another; and a replica started after it connected is pushed to it, so when
// every replica it knew stops it comes online on the new one.
func TestAgentFindsReplicasItWasToldOf(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // enrolled with, and online on, replica A
	a := e.r
	b := coordtest.Start(t, e.db.URL, e.opts)
	e.waitKeptReplica(b)

	e.stopAgent()
	a.Stop()
	e.r = b
	e.startAgent()
	e.waitOnlineOn(b)

	c := coordtest.Start(t, e.db.URL, e.opts)
	e.waitKeptReplica(c)
	b.Stop()
	e.r = c
	e.waitOnlineOn(c)
	if res := e.podium("run", "--image", e.image, "--", "echo", "hello from C"); res.code != 0 || !strings.Contains(string(res.stdout), "hello from C") {
		t.Fatalf("podium run on C: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// hostnameOf is the hostname the coordinator has for the node.
func (e *env) hostnameOf() string {
	e.t.Helper()
	res, err := e.r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range res.Msg.Nodes {
		if n.Id == e.node {
			return n.Hostname
		}
	}
	e.t.Fatalf("node %s is not listed", e.node)
	return ""
}

// The name given to enroll --hostname sticks once the agent runs (it is kept
// in the identity and sent in every Hello), and run --hostname overrides it.
func TestEnrolledHostnameSticksAndRunOverridesIt(t *testing.T) {
	t.Parallel()
	e := newEnvEnroll(t, coordtest.Options{}, []string{"--hostname", "enrolled-name"}, nil)
	if got := e.hostnameOf(); got != "enrolled-name" {
		t.Fatalf("node's hostname once the agent connected is %q, want the enrolled %q", got, "enrolled-name")
	}
	e.stopAgent()
	e.agentArgs = []string{"--hostname", "run-name"}
	e.startAgent()
	// The node may still be listed online from its last session until the
	// new one has started; the new Hello is what carries the name.
	coordtest.Eventually(t, 30*time.Second, "the node's hostname to be run-name (run --hostname)", func() bool {
		return e.hostnameOf() == "run-name"
	})
}
