package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

var auditCommand = &command{
	name:     "audit",
	synopsis: "[--since D] [--user NAME] [--limit N] [--json]",
	summary:  "Show the audit log: every call that changed something (admin only).",
	detail: `
Each entry is one call that changes something (submit, cancel, send, node
changes, tokens, people, secrets, registries), refused and failed calls
included: when, who (and the role they had), over which transport, the call,
what it acted on, and the result ("ok" or the error's code). --since takes a
duration back from now (24h, 30m) or a date (2026-12-01, or RFC 3339).
Newest first.`,
	usageExit: exitUsage,
	run:       runAudit,
}

func runAudit(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	sinceFlag := fs.String("since", "", "only entries since `D`: a duration back from now (24h) or a date (2026-12-01)")
	user := fs.String("user", "", "only the calls of `NAME`")
	limit := fs.Int("limit", 0, "at most `N` entries (0: the coordinator's default, 100)")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	if *limit < 0 || *limit > 10000 {
		return c.usageFailure(cmd, fs, fmt.Errorf("--limit %d: give 0 (the default) to 10000", *limit))
	}
	req := &podiumv1.ListAuditRequest{User: *user, Limit: int32(*limit)}
	if *sinceFlag != "" {
		since, err := parseSince(*sinceFlag, time.Now())
		if err != nil {
			return c.usageFailure(cmd, fs, err)
		}
		req.Since = timestamppb.New(since)
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.ListAuditResponse], error) {
		return e.admin.ListAudit(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return c.failed(cl, err, "")
	}
	if *asJSON {
		return writeJSONList(c, resp.Msg.GetEntries())
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tWHO\tROLE\tTRANSPORT\tACTION\tTARGET\tRESULT")
	for _, e := range resp.Msg.GetEntries() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.GetAt().AsTime().Local().Format(time.RFC3339), dash(e.GetWho()), dash(e.GetRole()),
			e.GetTransport(), e.GetAction(), dash(e.GetTarget()), e.GetResult())
	}
	tw.Flush()
	return exitOK
}

// parseSince reads --since: a duration back from now, or a date.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: give a duration back from now (24h, 30m) or a date (2026-12-01, or RFC 3339)", s)
}
