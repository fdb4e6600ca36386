package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The node commands change one node's settings. Each setting is stored on the
// node's row, so an offline node obeys it when it comes back, and a connected
// one gets it at once. Each prints the node's resulting state on stdout, as
// "task cancel" prints the task's.

var nodeGetCommand = &command{
	name:      "node get",
	synopsis:  "[--json] NODE",
	summary:   "Show one node.",
	detail:    `NODE is a node's ID, as podium nodes lists it. --json shows the node in full (field names as in the .proto files, its status as podium nodes prints it, numbers as numbers).`,
	usageExit: exitUsage,
	run:       runNodeGet,
}

var nodeDrainCommand = &command{
	name:     "node drain",
	synopsis: "NODE",
	summary:  "Stop giving a node new tasks; the ones it runs finish.",
	detail: `
The node keeps running what it holds and takes nothing new until podium node
undrain, even across restarts. A drained node that holds no tasks can be
removed with podium node rm.`,
	usageExit: exitUsage,
	run: func(ctx context.Context, c *cli, cmd *command, args []string) int {
		return runNodeDrain(ctx, c, cmd, args, true)
	},
}

var nodeUndrainCommand = &command{
	name:      "node undrain",
	synopsis:  "NODE",
	summary:   "Give a drained node new tasks again.",
	usageExit: exitUsage,
	run: func(ctx context.Context, c *cli, cmd *command, args []string) int {
		return runNodeDrain(ctx, c, cmd, args, false)
	},
}

var nodeSlotsCommand = &command{
	name:     "node slots",
	synopsis: "NODE N",
	summary:  "Set how many tasks a node may run at once (0: its own max).",
	detail: `
N overrides the max_tasks the node's agent reports; 0 removes the override, so
that the node's own number applies again. Lowering N below what the node runs
now cancels nothing: it takes no new tasks until it is under N.`,
	usageExit: exitUsage,
	run:       runNodeSlots,
}

var nodeLabelCommand = &command{
	name:     "node label",
	synopsis: "NODE [--add L]... [--remove L]...",
	summary:  "Add labels to a node or remove them.",
	detail: `
A label is a key or key=value, as in podium run --label: tasks that ask for a
label run only on nodes that have it. Tasks already on the node are not
affected. Only an admin changes a node's labels once it is enrolled; a label
added here shows in podium node get as added by the caller, even one the node
had from its token or asked for itself (the admin now vouches for it).`,
	usageExit: exitUsage,
	run:       runNodeLabel,
}

var nodeRmCommand = &command{
	name:     "node rm",
	synopsis: "NODE",
	summary:  "Forget a node that is drained or gone and holds no tasks.",
	detail: `
The coordinator refuses while the node is online and not drained, or holds
tasks, and says what to do. A removed node's agent can no longer connect: to
bring the machine back, enroll it again with a new token (podium token
create).`,
	usageExit: exitUsage,
	run:       runNodeRm,
}

var nodeRekeyCommand = &command{
	name:     "node rekey",
	synopsis: "[--ttl DURATION] NODE",
	summary:  "Move a node to a new machine: print a token that re-enrolls it.",
	detail: `
On a tailnet a node is bound to the Tailscale device it enrolled from, and its
key is refused from any other. When the node has really moved (a new machine,
a reinstalled one, a new Tailscale device), rekey it: this prints a
single-use token on stdout, and on the new machine

    podium-agent enroll --coordinator URL --token T --force

enrolls it as the same node (same ID, labels and settings) with a new key and
the new device. The old key stops working then, not before: a token that is
never used changes nothing. --ttl is how long the token may be used (default
the coordinator's, 1h).`,
	usageExit: exitUsage,
	run:       runNodeRekey,
}

// noNode is the sentence for a node the coordinator does not know.
func noNode(id string) string {
	return fmt.Sprintf("no node %s (podium nodes lists them)", id)
}

func runNodeGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the node as JSON")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want exactly one node ID"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	// There is no GetNode: the fleet is small enough to list.
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListNodesResponse], error) {
		return e.admin.ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	for _, n := range resp.Msg.GetNodes() {
		if n.GetId() != id {
			continue
		}
		if *asJSON {
			return c.writeJSON(n)
		}
		writeNode(c.stdout, n, resp.Msg.GetCoordinatorVersion(), time.Now())
		return exitOK
	}
	fmt.Fprintf(c.stderr, "podium: %s\n", noNode(id))
	return exitPodium
}

// labelsWithSources is a node's labels, each with where it came from, so a
// person deciding whether to trust a label sees who gave it:
// "linux (token), gpu=a100 (node), prod (admin alice)". A coordinator that
// sends no sources gets the labels alone.
func labelsWithSources(n *podiumv1.Node) string {
	src := n.GetLabelSources()
	if len(src) != len(n.GetLabels()) {
		return strings.Join(n.GetLabels(), ", ")
	}
	out := make([]string, len(src))
	for i, l := range src {
		from := l.GetSource()
		switch from {
		case "token":
			from = "from the enrollment token"
		case "node":
			from = "asked for by the node"
		case "admin":
			from = "added by " + l.GetSetBy()
			if l.GetSetBy() == "" {
				from = "added by an admin"
			}
		case "unknown", "":
			from = "source not recorded"
		}
		out[i] = fmt.Sprintf("%s (%s)", l.GetLabel(), from)
	}
	return strings.Join(out, ", ")
}

// writeNode prints a node as "key: value" lines, leaving out what is unset.
func writeNode(w io.Writer, n *podiumv1.Node, coordinatorVersion string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	line := func(key, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", key, value)
		}
	}
	capa := n.GetCapacity()
	line("id", n.GetId())
	line("hostname", n.GetHostname())
	line("status", nodeStatusName(n.GetStatus()))
	if v := n.GetAgentVersion(); v != "" {
		if older, _ := version.Older(v, coordinatorVersion); older {
			v += " (older than the coordinator's " + coordinatorVersion + ": apt-get update && apt-get upgrade on the node)"
		}
		line("agent version", v)
	}
	if n.GetDraining() {
		line("draining", "yes: it takes no new tasks")
	}
	line("labels", labelsWithSources(n))
	line("running", fmt.Sprint(n.GetRunningTasks()))
	line("free slots", fmt.Sprint(n.GetFreeSlots()))
	if capa.GetMaxTasks() != 0 {
		line("max tasks", fmt.Sprint(capa.GetMaxTasks()))
	}
	if capa.GetCpuCores() != 0 {
		line("cpu cores", fmt.Sprintf("%g", capa.GetCpuCores()))
	}
	if capa.GetMemoryMb() != 0 {
		line("memory", fmt.Sprintf("%d MiB", capa.GetMemoryMb()))
	}
	if capa.GetDiskFreeMb() != 0 {
		line("disk free", fmt.Sprintf("%d MiB", capa.GetDiskFreeMb()))
	}
	if f := capa.GetMinFreeDiskMb(); f != 0 {
		line("disk floor", fmt.Sprintf("%d MiB (podium-agent --min-free-disk-mb)", f))
	}
	if low := capa.GetDiskLowSince(); low != nil {
		line("disk", "below its free-space floor since "+timeText(low, now)+": it takes no new tasks until space frees")
	}
	if down := capa.GetEngineDownSince(); down != nil {
		line("docker engine", "has not answered since "+timeText(down, now)+": it takes no new tasks until it does")
	}
	line("task limits", limitsText(capa.GetLimits()))
	if n.GetAllowPrivilegedSidecars() {
		line("privileged sidecars", "allowed (podium-agent --allow-privileged-sidecars)")
	}
	for _, g := range n.GetGpus() {
		line(fmt.Sprintf("gpu %d", g.GetIndex()), fmt.Sprintf("%s, %d MiB, %s", dash(g.GetModel()), g.GetMemoryMb(), g.GetUuid()))
	}
	line("replica", n.GetReplica())
	if n.GetTailscaleDeviceId() != "" {
		line("tailscale device", n.GetTailscaleDevice()+" ("+n.GetTailscaleDeviceId()+")")
	}
	heartbeat := "never"
	if n.GetLastHeartbeatAt() != nil {
		heartbeat = timeText(n.GetLastHeartbeatAt(), now)
	}
	line("last heartbeat", heartbeat)
	line("enrolled", timeText(n.GetEnrolledAt(), now))
	tw.Flush()
}

// limitsText is the most one task may ask of the node, "" when it sets no
// maximum.
func limitsText(l *podiumv1.TaskLimits) string {
	var parts []string
	if v := l.GetMaxCpu(); v != 0 {
		parts = append(parts, fmt.Sprintf("cpu %g", v))
	}
	if v := l.GetMaxMemoryMb(); v != 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", v))
	}
	if v := l.GetMaxPids(); v != 0 {
		parts = append(parts, fmt.Sprintf("pids %d", v))
	}
	if v := l.GetMaxTimeoutSeconds(); v != 0 {
		parts = append(parts, "timeout "+secondsText(v))
	}
	if v := l.GetMaxOutputBytes(); v != 0 {
		parts = append(parts, fmt.Sprintf("output %d bytes", v))
	}
	if e := l.GetPermitEgress(); len(e) > 0 {
		parts = append(parts, "egress to "+strings.Join(e, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "at most " + strings.Join(parts, ", ")
}

// nodeBrief is a node's state in a few words, for the line a node command
// prints after a change: "online, draining, 2 running, 0 of 8 slots free".
func nodeBrief(n *podiumv1.Node) string {
	parts := []string{nodeStatusName(n.GetStatus())}
	if n.GetDraining() {
		parts = append(parts, "draining")
	}
	parts = append(parts, fmt.Sprintf("%d running", n.GetRunningTasks()))
	if m := n.GetCapacity().GetMaxTasks(); m != 0 {
		parts = append(parts, fmt.Sprintf("%d of %d slots free", n.GetFreeSlots(), m))
	} else {
		parts = append(parts, fmt.Sprintf("%d slots free", n.GetFreeSlots()))
	}
	return strings.Join(parts, ", ")
}

// nodeArgs parses the flags of a node command that takes want positional
// arguments, the first of them the node's ID.
func (c *cli) nodeArgs(cmd *command, fs *flag.FlagSet, args []string, want int, what string) (rest []string, done bool, code int) {
	rest, done, code = c.parseFlags(cmd, fs, args)
	if done {
		return nil, true, code
	}
	if len(rest) != want {
		return nil, true, c.usageFailure(cmd, fs, errors.New(what))
	}
	return rest, false, 0
}

func runNodeDrain(ctx context.Context, c *cli, cmd *command, args []string, draining bool) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.nodeArgs(cmd, fs, args, 1, "want exactly one node ID")
	if done {
		return code
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.DrainNodeResponse], error) {
		return e.admin.DrainNode(ctx, connect.NewRequest(&podiumv1.DrainNodeRequest{NodeId: id, Draining: draining}))
	})
	if err != nil {
		return c.failed(cl, err, noNode(id))
	}
	n := resp.Msg.GetNode()
	if draining {
		fmt.Fprintf(c.stdout, "node %s is draining: it takes no new tasks, and the ones it runs finish (%s)\n", id, nodeBrief(n))
	} else {
		fmt.Fprintf(c.stdout, "node %s takes new tasks again (%s)\n", id, nodeBrief(n))
	}
	return exitOK
}

func runNodeSlots(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.nodeArgs(cmd, fs, args, 2, "want a node ID and N, the most tasks it may run at once (0: its own max)")
	if done {
		return code
	}
	id := rest[0]
	slots, err := strconv.ParseInt(rest[1], 10, 32)
	if err != nil || slots < 0 {
		//nolint:staticcheck // ST1005: N is the argument's name in the synopsis, capital there too
		return c.usageFailure(cmd, fs, fmt.Errorf("N %q: want a whole number of tasks, 0 or more (0: the node's own max)", rest[1]))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetNodeSlotsResponse], error) {
		return e.admin.SetNodeSlots(ctx, connect.NewRequest(&podiumv1.SetNodeSlotsRequest{NodeId: id, MaxTasks: int32(slots)}))
	})
	if err != nil {
		return c.failed(cl, err, noNode(id))
	}
	n := resp.Msg.GetNode()
	switch m := n.GetCapacity().GetMaxTasks(); {
	case slots != 0:
		fmt.Fprintf(c.stdout, "node %s runs at most %d tasks at once (%s)\n", id, slots, nodeBrief(n))
	case m != 0:
		fmt.Fprintf(c.stdout, "node %s is back to its own max of %d tasks at once (%s)\n", id, m, nodeBrief(n))
	default:
		fmt.Fprintf(c.stdout, "node %s is back to its own max (%s)\n", id, nodeBrief(n))
	}
	return exitOK
}

func runNodeLabel(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	var add, remove stringList
	fs.Var(&add, "add", "give the node the `LABEL`, key or key=value (repeatable)")
	fs.Var(&remove, "remove", "take the `LABEL` from the node (repeatable)")
	rest, done, code := c.nodeArgs(cmd, fs, args, 1, "want exactly one node ID")
	if done {
		return code
	}
	if len(add) == 0 && len(remove) == 0 {
		return c.usageFailure(cmd, fs, errors.New("nothing to change: give --add LABEL or --remove LABEL"))
	}
	for _, flagLabels := range []struct {
		name   string
		labels []string
	}{{"add", add}, {"remove", remove}} {
		for _, l := range flagLabels.labels {
			if problem := taskspec.LabelProblem(l); problem != "" {
				return c.usageFailure(cmd, fs, fmt.Errorf("--%s: %s", flagLabels.name, problem))
			}
		}
	}
	for _, l := range add {
		for _, r := range remove {
			if l == r {
				return c.usageFailure(cmd, fs, fmt.Errorf("label %q is both added and removed: give it once", l))
			}
		}
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetNodeLabelsResponse], error) {
		return e.admin.SetNodeLabels(ctx, connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: id, Add: add, Remove: remove}))
	})
	if err != nil {
		return c.failed(cl, err, noNode(id))
	}
	n := resp.Msg.GetNode()
	if len(n.GetLabels()) == 0 {
		fmt.Fprintf(c.stdout, "node %s has no labels (%s)\n", id, nodeBrief(n))
	} else {
		fmt.Fprintf(c.stdout, "node %s has the labels %s (%s)\n", id, strings.Join(n.GetLabels(), ", "), nodeBrief(n))
	}
	return exitOK
}

func runNodeRm(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.nodeArgs(cmd, fs, args, 1, "want exactly one node ID")
	if done {
		return code
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	_, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RemoveNodeResponse], error) {
		return e.admin.RemoveNode(ctx, connect.NewRequest(&podiumv1.RemoveNodeRequest{NodeId: id}))
	})
	if err != nil {
		// FailedPrecondition (online and not drained, or holding tasks)
		// comes with the coordinator's advice, printed as it is.
		return c.failed(cl, err, noNode(id))
	}
	fmt.Fprintf(c.stdout, "node %s removed\n", id)
	return exitOK
}

func runNodeRekey(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	ttl := fs.String("ttl", "", "keep the token usable for `DURATION`, e.g. 30m (default: the coordinator's, 1h)")
	rest, done, code := c.nodeArgs(cmd, fs, args, 1, "want exactly one node ID")
	if done {
		return code
	}
	var ttlSeconds int64
	if *ttl != "" {
		var err error
		if ttlSeconds, err = taskspec.ParseSeconds(*ttl); err != nil {
			return c.usageFailure(cmd, fs, fmt.Errorf("--ttl %v", err))
		}
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	id := rest[0]
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RekeyNodeResponse], error) {
		return e.admin.RekeyNode(ctx, connect.NewRequest(&podiumv1.RekeyNodeRequest{NodeId: id, TtlSeconds: ttlSeconds}))
	})
	if err != nil {
		return c.failed(cl, err, noNode(id))
	}
	m := resp.Msg
	if m.GetToken() == "" {
		fmt.Fprintf(c.stderr, "podium: the coordinator at %s returned an empty token: is it a podium-coordinator?\n", cl.server())
		return exitPodium
	}
	fmt.Fprintln(c.stdout, m.GetToken())
	fmt.Fprintf(c.stderr, "→ on the node's new machine: podium-agent enroll --coordinator %s --token TOKEN --force\n", cl.server())
	fmt.Fprintf(c.stderr, "→ it becomes node %s there; the old key stops working when the token is used", id)
	if exp := m.GetExpiresAt(); exp != nil {
		fmt.Fprintf(c.stderr, " (it expires at %s)", exp.AsTime().Local().Format(time.RFC3339))
	}
	fmt.Fprintln(c.stderr)
	return exitOK
}
