package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// expiryDay writes the date retention removed something, in UTC, as the
// coordinator's messages do.
func expiryDay(ts *timestamppb.Timestamp) string { return ts.AsTime().UTC().Format("2006-01-02") }

var logsCommand = &command{
	name:     "logs",
	synopsis: "[-f] [--quiet] ID",
	summary:  "Print a task's output: its stdout on stdout, its stderr on stderr.",
	detail: `
Prints the output stored for the task, byte for byte, with podium's notes and
state changes as "→ " lines on stderr (--quiet leaves them out). With -f it
keeps printing until the task ends, reconnecting if the coordinator restarts
(to another replica, when --server lists several), and exits 125 if none can
be reached for --reconnect-timeout.

logs exits 0 once it has printed the output, whatever the task's own exit code:
it reports on itself, not on the task (podium task get shows the task's code).
A log that retention removed (the coordinator's --retain-logs) is said to
have expired, with the date, and logs exits 125.`,
	usageExit: exitUsage,
	run:       runLogs,
}

func runLogs(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	var follow, quiet bool
	fs.BoolVar(&follow, "f", false, "follow: keep printing until the task ends")
	fs.BoolVar(&follow, "follow", false, "same as -f")
	fs.BoolVar(&quiet, "quiet", false, "leave out podium's \"→\" lines")
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	p := newPrinter(c.stdout, c.stderr, quiet)
	f := &follower{
		cl: cl, id: id, p: p, follow: follow,
		minBackoff: c.minBackoff, maxBackoff: c.maxBackoff,
		reconnectTimeout: c.reconnectTimeout, noteEvery: c.reconnectNote,
	}
	final, err := f.run(ctx)
	if errors.Is(err, errGaveUp) {
		c.gaveUp(p, cl, id, err)
		return exitPodium
	}
	if err != nil {
		p.fail("%s", cl.describe(err, fmt.Sprintf("no task %s", id)))
		return exitPodium
	}
	if at := final.GetLogExpiredAt(); at != nil {
		p.fail("the log of %s expired by retention on %s (the coordinator's --retain-logs); the task itself is kept: podium task get %s",
			id, expiryDay(at), id)
		return exitPodium
	}
	if final != nil {
		p.final(final)
	}
	return exitOK
}
