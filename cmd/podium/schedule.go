package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var scheduleCreateCommand = &command{
	name:     "schedule create",
	synopsis: "NAME --cron EXPR --spec FILE [--timezone ZONE] [--overlap skip|allow|cancel_previous]",
	summary:  "Run a task spec periodically (member).",
	detail: `
EXPR is a standard 5-field cron expression (minute hour day-of-month month
day-of-week, e.g. '*/15 * * * *'; @hourly, @daily and the like work too),
read in ZONE (an IANA name such as Europe/Berlin; UTC by default). At each
tick the coordinator's leader creates one task from the spec, owned by you.
--overlap says what a tick does while the previous tick's task still runs:
skip it (the default), allow both, or cancel_previous. After downtime at most
one missed tick is run. NAME: a-z, 0-9, '.', '_', '-', at most 64 bytes.`,
	usageExit: exitUsage,
	run:       runScheduleCreate,
}

func runScheduleCreate(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cronExpr := fs.String("cron", "", "the 5-field cron `EXPR`")
	tz := fs.String("timezone", "", "the IANA time `ZONE` EXPR is read in (default UTC)")
	specFile := fs.String("spec", "", "the task spec `FILE` (YAML or JSON; - for stdin)")
	overlap := fs.String("overlap", "skip", "what a tick does while the previous task runs: `skip|allow|cancel_previous`")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want the schedule's NAME"))
	}
	if *cronExpr == "" {
		return c.usageFailure(cmd, fs, errors.New("--cron: required, e.g. --cron '*/15 * * * *'"))
	}
	if *specFile == "" {
		return c.usageFailure(cmd, fs, errors.New("--spec: required, the task spec file each tick runs"))
	}
	spec, err := readSpec(*specFile, c.stdin)
	if err != nil {
		return c.usageFailure(cmd, fs, err)
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ScheduleServiceCreateResponse], error) {
		return e.schedules.Create(ctx, connect.NewRequest(&podiumv1.ScheduleServiceCreateRequest{
			Name: rest[0], Cron: *cronExpr, Timezone: *tz, Spec: spec, Overlap: *overlap}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	sc := resp.Msg.GetSchedule()
	fmt.Fprintf(c.stderr, "→ schedule %s created; next run %s\n", sc.GetName(), nextRun(sc))
	return exitOK
}

func nextRun(sc *podiumv1.Schedule) string {
	if sc.GetNextRunAt() == nil {
		return "-"
	}
	loc, err := time.LoadLocation(sc.GetTimezone())
	if err != nil {
		loc = time.UTC
	}
	return sc.GetNextRunAt().AsTime().In(loc).Format("2006-01-02 15:04 MST")
}

var scheduleLsCommand = &command{
	name:      "schedule ls",
	synopsis:  "[--json]",
	summary:   "List your schedules (an admin's: everyone's).",
	usageExit: exitUsage,
	run:       runScheduleLs,
}

func runScheduleLs(ctx context.Context, c *cli, cmd *command, args []string) int {
	return runAdminList(ctx, c, cmd, args, func(ctx context.Context, e *endpoint) ([]*podiumv1.Schedule, error) {
		resp, err := e.schedules.List(ctx, connect.NewRequest(&podiumv1.ScheduleServiceListRequest{}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetSchedules(), nil
	}, []string{"NAME", "CRON", "TIMEZONE", "OVERLAP", "STATE", "NEXT RUN", "OWNER", "WHY PAUSED"}, func(sc *podiumv1.Schedule) []string {
		state := "active"
		if sc.GetPaused() {
			state = "paused"
		}
		return []string{sc.GetName(), sc.GetCron(), sc.GetTimezone(), sc.GetOverlap(), state, nextRun(sc), sc.GetCreatedBy(),
			dash(sc.GetPausedReason())}
	})
}

var scheduleGetCommand = &command{
	name:      "schedule get",
	synopsis:  "[--json] NAME",
	summary:   "Show a schedule and its latest ticks and their tasks.",
	usageExit: exitUsage,
	run:       runScheduleGet,
}

func runScheduleGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the schedule and its ticks as JSON")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return c.usageFailure(cmd, fs, errors.New("want the schedule's NAME"))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ScheduleServiceGetResponse], error) {
		return e.schedules.Get(ctx, connect.NewRequest(&podiumv1.ScheduleServiceGetRequest{Name: rest[0]}))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	if *asJSON {
		return c.writeJSON(resp.Msg)
	}
	sc := resp.Msg.GetSchedule()
	state := "active"
	switch {
	case sc.GetPausedReason() != "":
		state = "paused by the coordinator: " + sc.GetPausedReason()
	case sc.GetPaused():
		state = "paused"
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s\nCron:\t%s (%s)\nOverlap:\t%s\nState:\t%s\nNext run:\t%s\nOwner:\t%s\nImage:\t%s\n",
		sc.GetName(), sc.GetCron(), sc.GetTimezone(), sc.GetOverlap(), state, nextRun(sc), sc.GetCreatedBy(), sc.GetSpec().GetImage())
	_ = tw.Flush()
	if len(resp.Msg.GetTicks()) > 0 {
		fmt.Fprintln(c.stdout)
		tw = tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "TICK\tTASK\tNOTE")
		for _, t := range resp.Msg.GetTicks() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.GetTick().AsTime().Local().Format(time.RFC3339),
				cmp.Or(t.GetTaskId(), "-"), t.GetNote())
		}
		_ = tw.Flush()
	}
	return exitOK
}

// scheduleAction is pause, resume, rm or run-now: one NAME, one call.
func scheduleAction(name, summary string, call func(context.Context, *endpoint, string) (string, error)) *command {
	cmd := &command{name: "schedule " + name, synopsis: "NAME", summary: summary, usageExit: exitUsage}
	cmd.run = func(ctx context.Context, c *cli, cmd *command, args []string) int {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		rest, done, code := c.parseFlags(cmd, fs, args)
		if done {
			return code
		}
		if len(rest) != 1 {
			return c.usageFailure(cmd, fs, errors.New("want the schedule's NAME"))
		}
		cl, code, ok := c.dial(cmd)
		if !ok {
			return code
		}
		msg, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (string, error) { return call(ctx, e, rest[0]) })
		if err != nil {
			return c.failed(cl, err, "")
		}
		fmt.Fprintln(c.stderr, msg)
		return exitOK
	}
	return cmd
}

var (
	schedulePauseCommand = scheduleAction("pause", "Stop a schedule's ticks until resumed.",
		func(ctx context.Context, e *endpoint, name string) (string, error) {
			_, err := e.schedules.Pause(ctx, connect.NewRequest(&podiumv1.ScheduleServicePauseRequest{Name: name}))
			return "→ schedule " + name + " paused", err
		})
	scheduleResumeCommand = scheduleAction("resume", "Resume a paused schedule from its next tick (missed ticks are not run).",
		func(ctx context.Context, e *endpoint, name string) (string, error) {
			r, err := e.schedules.Resume(ctx, connect.NewRequest(&podiumv1.ScheduleServiceResumeRequest{Name: name}))
			if err != nil {
				return "", err
			}
			return "→ schedule " + name + " resumed; next run " + nextRun(r.Msg.GetSchedule()), nil
		})
	scheduleRmCommand = scheduleAction("rm", "Remove a schedule; the tasks it created stay.",
		func(ctx context.Context, e *endpoint, name string) (string, error) {
			_, err := e.schedules.Remove(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRemoveRequest{Name: name}))
			return "→ schedule " + name + " removed", err
		})
	scheduleRunNowCommand = scheduleAction("run-now", "Create a schedule's task now, whatever its overlap mode; its next tick stays.",
		func(ctx context.Context, e *endpoint, name string) (string, error) {
			r, err := e.schedules.RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: name}))
			if err != nil {
				return "", err
			}
			return "→ task " + r.Msg.GetTask().GetId() + " created by schedule " + name, nil
		})
)
