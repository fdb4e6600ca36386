package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var whoamiCommand = &command{
	name:     "whoami",
	synopsis: "[--json]",
	summary:  "Show who the coordinator thinks you are.",
	detail: `
On a tailnet the coordinator knows callers by what Tailscale says their device
is, and needs no token: a person (an untagged device with a login, which is
what your tasks record as requested_by), a node (a device with the node tag),
or refused (any other tag). Over the local transport it knows you by your
token: the coordinator's bootstrap token (an admin) or a personal one (podium
user add). It also shows your role and where it came from. This prints that decision: the same one every other command
is admitted or refused on.`,
	usageExit: exitUsage,
	run:       runWhoami,
}

func runWhoami(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
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
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.WhoAmIResponse], error) {
		return e.admin.WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	m := resp.Msg
	if *asJSON {
		return c.writeJSON(m)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 1, ' ', 0)
	line := func(key, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", key, value)
		}
	}
	line("kind", callerKindName(m.GetKind()))
	line("login", m.GetLogin())
	role := m.GetRole()
	if role != "" && m.GetRoleFrom() != "" {
		role += " (from the " + m.GetRoleFrom() + ")"
	}
	if role == "" && m.GetKind() == podiumv1.CallerKind_CALLER_KIND_PERSON {
		role = "none: ask an admin for one"
	}
	line("role", role)
	groups := strings.Join(m.GetGroups(), ", ")
	switch {
	case m.GetRole() == "admin" && groups != "":
		groups += "; an admin may submit to any group"
	case m.GetRole() == "admin":
		groups = "any (an admin may submit to any group)"
	case groups == "" && m.GetRole() == "member":
		groups = "none: leave a spec's group: out; an admin adds you to one with podium user set-groups"
	}
	line("groups", groups)
	device := m.GetDevice()
	if m.GetDeviceId() != "" {
		device += " (" + m.GetDeviceId() + ")"
	}
	line("device", device)
	line("tags", strings.Join(m.GetTags(), ", "))
	line("coordinator", cl.server())
	line("transport", m.GetTransport())
	tw.Flush()
	return exitOK
}

func callerKindName(k podiumv1.CallerKind) string {
	switch k {
	case podiumv1.CallerKind_CALLER_KIND_PERSON:
		return "person"
	case podiumv1.CallerKind_CALLER_KIND_NODE:
		return "node"
	case podiumv1.CallerKind_CALLER_KIND_TOKEN:
		return "token (the coordinator's bootstrap token, PODIUM_TOKEN)"
	case podiumv1.CallerKind_CALLER_KIND_USER:
		return "user (a personal API token)"
	}
	return "unknown"
}
