package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var nodesCommand = &command{
	name:     "nodes",
	synopsis: "[--json]",
	summary:  "List the nodes of the fleet and their health.",
	detail: `
STATUS is what the coordinator's watchdog decided from the node's last
heartbeat (online, unreachable, offline). DRAINING is "yes" for a node that
takes no new work (podium node drain). PRIVILEGED is "yes" for a node whose
agent runs privileged sidecars (podium-agent --allow-privileged-sidecars): only
such nodes are given tasks with a sidecar that has privileged: true. FREE
SLOTS is how many more tasks it would accept now. VERSION is the version of
the node's agent, marked "(older)" when it is older than the coordinator's
(the version its apt repository serves: apt-get update && apt-get upgrade on
the node moves it there; docs/operations.md, "Upgrading an agent"), or
"(differs)" when the two are not release versions and cannot be ordered.`,
	usageExit: exitUsage,
	run:       runNodes,
}

func runNodes(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListNodesResponse], error) {
		return e.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	if *asJSON {
		return writeJSONList(c, resp.Msg.GetNodes())
	}
	writeNodeTable(c.stdout, resp.Msg.GetNodes(), resp.Msg.GetCoordinatorVersion(), time.Now())
	if old := countOlder(resp.Msg.GetNodes(), resp.Msg.GetCoordinatorVersion()); old > 0 {
		fmt.Fprintf(c.stderr, "%d node(s) run an agent older than the coordinator (%s): drain each, run apt-get update && apt-get upgrade on it, undrain (docs/operations.md, \"Upgrading an agent\")\n",
			old, resp.Msg.GetCoordinatorVersion())
	}
	return exitOK
}

// agentVersion is a node's agent version for a table cell, marked when it is
// not the coordinator's.
func agentVersion(agent, coordinator string) string {
	if agent == "" {
		return "-"
	}
	if coordinator == "" {
		return agent
	}
	switch older, known := version.Older(agent, coordinator); {
	case !known:
		return agent + " (differs)"
	case older:
		return agent + " (older)"
	}
	return agent
}

// countOlder counts the nodes whose agent is older than the coordinator.
func countOlder(nodes []*podiumv1.Node, coordinator string) int {
	n := 0
	for _, node := range nodes {
		if older, _ := version.Older(node.GetAgentVersion(), coordinator); older && node.GetAgentVersion() != "" {
			n++
		}
	}
	return n
}

func writeNodeTable(w io.Writer, nodes []*podiumv1.Node, coordinatorVersion string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOSTNAME\tVERSION\tSTATUS\tDRAINING\tLABELS\tPRIVILEGED\tRUNNING\tFREE SLOTS\tGPUS\tLAST HEARTBEAT")
	for _, n := range nodes {
		draining := "no"
		if n.GetDraining() {
			draining = "yes"
		}
		heartbeat := "never"
		if n.GetLastHeartbeatAt() != nil {
			heartbeat = age(n.GetLastHeartbeatAt(), now) + " ago"
		}
		privileged := "no"
		if n.GetAllowPrivilegedSidecars() {
			privileged = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n",
			n.GetId(), dash(n.GetHostname()), agentVersion(n.GetAgentVersion(), coordinatorVersion), nodeStatusName(n.GetStatus()), draining,
			dash(strings.Join(n.GetLabels(), ",")), privileged, n.GetRunningTasks(), n.GetFreeSlots(),
			dash(gpusBrief(n.GetGpus())), heartbeat)
	}
	tw.Flush()
}

// gpusBrief is a node's GPUs in a table cell: the count and each model
// with its memory, "2× NVIDIA H100 80GB HBM3 (81559 MiB)", or "" for none.
// GPUs of one model and memory are counted together, in the order the node
// lists them.
func gpusBrief(gpus []*podiumv1.Gpu) string {
	type kind struct {
		model string
		mem   int64
	}
	var order []kind
	count := map[kind]int{}
	for _, g := range gpus {
		k := kind{g.GetModel(), g.GetMemoryMb()}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d× %s (%d MiB)", count[k], dash(k.model), k.mem)
	}
	return strings.Join(parts, ", ")
}

func nodeStatusName(s podiumv1.NodeStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATUS_"))
}
