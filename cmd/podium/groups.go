package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var groupSetWeightCommand = &command{
	name:     "group set-weight",
	synopsis: "NAME WEIGHT",
	summary:  "Set a spec group's fair share of the slots (admin only).",
	detail: `
NAME is a spec's group: (letters, digits and . _ / -, at most 64 bytes); the
group need not have tasks yet. WEIGHT is a whole number from 1 (the default)
to 1000. Among queued tasks of equal priority, the scheduler shares free
slots between sharers (groups, and submitters of tasks without a group) in
proportion to their weights: a group of weight 2 gets about twice the slots
of a sharer of weight 1 while both have tasks waiting. Priority still wins.
It applies from the leader's next dispatch pass; WEIGHT 1 removes the group's
own weight.`,
	usageExit: exitUsage,
	run:       runGroupSetWeight,
}

var groupLsCommand = &command{
	name:     "group ls",
	synopsis: "[--json]",
	summary:  "List fair-share groups: their weights and tasks (admin only).",
	detail: `
Lists the groups an admin gave a weight, and the groups of the tasks now
holding a slot or queued (weight 1), with how many of each group's tasks
hold a slot and wait.`,
	usageExit: exitUsage,
	run:       runGroupLs,
}

func runGroupSetWeight(ctx context.Context, c *cli, cmd *command, args []string) int {
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
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.SetGroupWeightResponse], error) {
		return e.admin.SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: rest[0], Weight: int32(w)}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	fmt.Fprintf(c.stderr, "→ group %s now has weight %d\n", resp.Msg.GetGroup().GetName(), resp.Msg.GetGroup().GetWeight())
	return exitOK
}

func runGroupLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	now := time.Now()
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.Group, error) {
		resp, err := e.admin.ListGroups(ctx, connect.NewRequest(&podiumv1.ListGroupsRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetGroups(), nil
	}, []string{"NAME", "WEIGHT", "RUNNING", "QUEUED", "SET", "BY"}, func(g *podiumv1.Group) []string {
		return []string{g.GetName(), strconv.Itoa(int(max(g.GetWeight(), 1))), strconv.FormatInt(g.GetRunning(), 10),
			strconv.FormatInt(g.GetQueued(), 10), age(g.GetSetAt(), now), dash(g.GetSetBy())}
	})
}
