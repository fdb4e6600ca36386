package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var tokenCreateCommand = &command{
	name:     "token create",
	synopsis: "[--label L]... [--allow-node-labels] [--ttl DURATION]",
	summary:  "Create a single-use enrollment token for a new node.",
	detail: `
Prints only the token on stdout, so that T=$(podium token create) works; the
expiry goes to stderr. The token enrolls one node, once, before it expires;
the coordinator keeps only its SHA-256, so it cannot be shown again. The node
enrolled with it carries exactly the given labels: labels decide which tasks,
and so which secrets, reach a node, so a node does not choose its own, and
podium-agent enroll --label asking for others is refused (the token stays
unused). --allow-node-labels lets the node add labels of its own at
enrollment; give it only to a token for a machine you trust to pick them.
podium node label changes a node's labels later, and podium node get shows
where each came from.`,
	usageExit: exitUsage,
	run:       runTokenCreate,
}

func runTokenCreate(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	var labels stringList
	fs.Var(&labels, "label", "give the enrolled node the `LABEL`, key or key=value (repeatable)")
	allowNode := fs.Bool("allow-node-labels", false, "let the node add labels of its own (podium-agent enroll --label)")
	ttl := fs.String("ttl", "", "keep the token usable for `DURATION`, e.g. 30m (default: the coordinator's, 1h)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	for _, l := range labels {
		if problem := taskspec.LabelProblem(l); problem != "" {
			return c.usageFailure(cmd, fs, fmt.Errorf("--label: %s", problem))
		}
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
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.CreateEnrollmentTokenResponse], error) {
		return e.admin.CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{Labels: labels, TtlSeconds: ttlSeconds,
			AllowNodeLabels: *allowNode}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	m := resp.Msg
	if m.GetToken() == "" {
		fmt.Fprintf(c.stderr, "podium: the coordinator at %s returned an empty token: is it a podium-coordinator?\n", cl.server())
		return exitPodium
	}
	fmt.Fprintln(c.stdout, m.GetToken())
	if exp := m.GetExpiresAt(); exp != nil {
		fmt.Fprintf(c.stderr, "→ expires at %s (in %s); it enrolls one node, once\n",
			exp.AsTime().Local().Format(time.RFC3339), time.Until(exp.AsTime()).Round(time.Second))
	}
	if len(m.GetLabels()) > 0 {
		fmt.Fprintf(c.stderr, "→ the node gets the labels %s\n", strings.Join(m.GetLabels(), ", "))
	}
	if m.GetAllowNodeLabels() {
		fmt.Fprintln(c.stderr, "→ the node may add labels of its own (podium-agent enroll --label): they steer tasks and their secrets to it")
	} else if *allowNode {
		fmt.Fprintf(c.stderr, "podium: the coordinator at %s did not make the token allow node labels: upgrade it; the node carries only the token's labels\n", cl.server())
	}
	return exitOK
}
