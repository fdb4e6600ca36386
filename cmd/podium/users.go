package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

const roleHelp = "admin (everything), member (submit; cancel and message their own tasks) or viewer (read only)"

var userAddCommand = &command{
	name:     "user add",
	synopsis: "NAME --role ROLE [--group GROUP]...",
	summary:  "Add a person and print their personal API token (admin only).",
	detail: `
NAME is a user name (a-z, 0-9, '.', '_', '-') or, on a tailnet, the person's
Tailscale login (alice@example.com); "token" is reserved (it names the
coordinator's bootstrap token). ROLE is ` + roleHelp + `.
Each --group is a fair-share group (a spec's group:) the person may submit
to; a member may submit only to their own groups, an admin to any. Change
them later with "podium user set-groups".
Prints only the token on stdout: give it to the person, who uses it as
PODIUM_TOKEN (or stores it with "podium login"). The coordinator keeps only
its SHA-256, so it cannot be shown again; to replace a lost or leaked token,
"podium user rotate-token NAME". On a tailnet the token is not needed: the
login is what names them.`,
	usageExit: exitUsage,
	run:       runUserAdd,
}

var userLsCommand = &command{
	name:      "user ls",
	synopsis:  "[--json]",
	summary:   "List the people the coordinator knows, with their roles and groups (admin only).",
	usageExit: exitUsage,
	run:       runUserLs,
}

var userRmCommand = &command{
	name:      "user rm",
	synopsis:  "NAME",
	summary:   "Remove a person; their token stops working at once (admin only).",
	usageExit: exitUsage,
	run:       runUserRm,
}

var userRotateTokenCommand = &command{
	name:     "user rotate-token",
	synopsis: "[NAME]",
	summary:  "Replace your personal API token, or (admin) another person's; the old one stops working.",
	detail: `
Without NAME it replaces your own token: anyone may, at once, when a token
may have leaked. With NAME an admin replaces that person's. Prints only the
new token on stdout, once; the old one stops working with the next call,
console sessions signed in with it included. When you rotate your own token
and podium was using the one "podium login" stored, the stored one is
replaced too.`,
	usageExit: exitUsage,
	run:       runUserRotateToken,
}

var userSetRoleCommand = &command{
	name:      "user set-role",
	synopsis:  "NAME ROLE",
	summary:   "Change a person's role (admin only).",
	detail:    "\nROLE is " + roleHelp + ". It applies from the person's next call.",
	usageExit: exitUsage,
	run:       runUserSetRole,
}

var userSetWeightCommand = &command{
	name:     "user set-weight",
	synopsis: "NAME WEIGHT",
	summary:  "Set a person's fair share of the slots (admin only).",
	detail: `
WEIGHT is a whole number from 1 (the default) to 1000. Among queued tasks of
equal priority, the scheduler shares free slots between submitters in
proportion to their weights: a person of weight 2 gets about twice the slots
of a person of weight 1 while both have tasks waiting. Priority still wins:
a higher-priority task goes first whoever submitted it. It applies from the
leader's next dispatch pass.`,
	usageExit: exitUsage,
	run:       runUserSetWeight,
}

var userSetGroupsCommand = &command{
	name:     "user set-groups",
	synopsis: "NAME [GROUP]...",
	summary:  "Set the fair-share groups a person may submit to (admin only).",
	detail: `
Replaces the person's groups with the GROUPs given (none: they belong to no
group). A member may give a spec's group: only one of their groups, so that
nobody borrows another team's fair-share weight (podium group set-weight);
an admin may give any. It applies from the person's next submit; their
schedules are checked at each tick, and one whose group they left is
paused, saying why.`,
	usageExit: exitUsage,
	run:       runUserSetGroups,
}

func runUserAdd(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	role := fs.String("role", "", "the person's `ROLE`: admin, member or viewer")
	var groups stringList
	fs.Var(&groups, "group", "a fair-share `GROUP` the person may submit to (repeatable)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, fmt.Errorf("want one NAME, got %d arguments", len(rest)))
	}
	if *role == "" {
		return c.usageFailure(cmd, fs, fmt.Errorf("--role: required: %s", roleHelp))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.AddUserResponse], error) {
		return e.admin.AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: rest[0], Role: *role, Groups: groups}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	u := resp.Msg.GetUser()
	fmt.Fprintln(c.stdout, resp.Msg.GetToken())
	in := ""
	if len(u.GetGroups()) > 0 {
		in = " in " + strings.Join(u.GetGroups(), ", ")
	}
	fmt.Fprintf(c.stderr, "→ %s is a %s%s; the token above is shown once\n", u.GetName(), u.GetRole(), in)
	return exitOK
}

func runUserSetGroups(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) < 1 {
		return c.usageFailure(cmd, fs, errors.New("want NAME and the GROUPs (none takes the person out of every group)"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetUserGroupsResponse], error) {
		return e.admin.SetUserGroups(ctx, connect.NewRequest(&podiumv1.SetUserGroupsRequest{Name: rest[0], Groups: rest[1:]}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	u := resp.Msg.GetUser()
	if len(u.GetGroups()) == 0 {
		fmt.Fprintf(c.stderr, "→ %s now belongs to no group\n", u.GetName())
	} else {
		fmt.Fprintf(c.stderr, "→ %s now belongs to %s\n", u.GetName(), strings.Join(u.GetGroups(), ", "))
	}
	return exitOK
}

func runUserLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	now := time.Now()
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.User, error) {
		resp, err := e.admin.ListUsers(ctx, connect.NewRequest(&podiumv1.ListUsersRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetUsers(), nil
	}, []string{"NAME", "ROLE", "WEIGHT", "GROUPS", "ADDED", "BY"}, func(u *podiumv1.User) []string {
		return []string{u.GetName(), u.GetRole(), strconv.Itoa(int(max(u.GetWeight(), 1))), dash(strings.Join(u.GetGroups(), ",")),
			age(u.GetCreatedAt(), now), dash(u.GetCreatedBy())}
	})
}

func runUserRotateToken(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 1 {
		return c.usageFailure(cmd, fs, fmt.Errorf("want at most one NAME, got %d arguments", len(rest)))
	}
	name := ""
	if len(rest) == 1 {
		name = rest[0]
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	// Whether this call presents the token podium login stored: if it
	// rotates that very token, the stored copy must follow.
	stored := c.token == "" && c.file.Token != "" && c.server == c.file.Server
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RotateUserTokenResponse], error) {
		return e.admin.RotateUserToken(ctx, connect.NewRequest(&podiumv1.RotateUserTokenRequest{Name: name}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	u := resp.Msg.GetUser()
	fmt.Fprintln(c.stdout, resp.Msg.GetToken())
	fmt.Fprintf(c.stderr, "→ %s has a new token, shown once above; the old one no longer works\n", u.GetName())
	if stored && name == "" {
		fc := c.file
		fc.Token = resp.Msg.GetToken()
		path := c.configPath()
		if err := writeConfig(path, fc); err != nil {
			fmt.Fprintf(c.stderr, "podium: the token podium login stored is now the old one, and replacing it failed: %v; "+
				"store the new one with podium login\n", err)
			return exitPodium
		}
		fmt.Fprintf(c.stderr, "→ the new token replaced the one stored in %s\n", path)
	}
	return exitOK
}

func runUserRm(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, fmt.Errorf("want one NAME, got %d arguments", len(rest)))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	if _, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.RemoveUserResponse], error) {
		return e.admin.RemoveUser(ctx, connect.NewRequest(&podiumv1.RemoveUserRequest{Name: rest[0]}))
	}); err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ removed %s\n", rest[0])
	return exitOK
}

func runUserSetRole(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 2 {
		return c.usageFailure(cmd, fs, fmt.Errorf("want NAME and ROLE, got %d arguments", len(rest)))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetUserRoleResponse], error) {
		return e.admin.SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: rest[0], Role: rest[1]}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ %s is now a %s\n", resp.Msg.GetUser().GetName(), resp.Msg.GetUser().GetRole())
	return exitOK
}

func runUserSetWeight(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 2 {
		return c.usageFailure(cmd, fs, fmt.Errorf("want NAME and WEIGHT, got %d arguments", len(rest)))
	}
	w, err := strconv.ParseInt(rest[1], 10, 32)
	if err != nil || w < 1 || w > 1000 {
		return c.usageFailure(cmd, fs, fmt.Errorf("WEIGHT: %q is not a whole number from 1 to 1000", rest[1]))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetUserWeightResponse], error) {
		return e.admin.SetUserWeight(ctx, connect.NewRequest(&podiumv1.SetUserWeightRequest{Name: rest[0], Weight: int32(w)}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ %s now has weight %d\n", resp.Msg.GetUser().GetName(), resp.Msg.GetUser().GetWeight())
	return exitOK
}
