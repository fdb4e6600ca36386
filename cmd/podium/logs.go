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
	synopsis: "[-f] [--tail N] [--quiet] ID",
	summary:  "Print a task's output: its stdout on stdout, its stderr on stderr.",
	detail: `
Prints the output stored for the task, byte for byte, with podium's notes and
state changes as "→ " lines on stderr (--quiet leaves them out). With -f it
keeps printing until the task ends, reconnecting if the coordinator restarts
(to another replica, when --server lists several), and exits 125 if none can
be reached for --reconnect-timeout. --tail N prints only the last N lines of
what is stored so far (stdout and stderr together, in the order they came, each
on its own stream; the "→ " lines count too unless --quiet), then, with -f,
everything after; podium reads the whole stored log to find them.

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
	tailFlag := fs.String("tail", "all", "print only the last `N` lines stored so far (then, with -f, everything after)")
	id, cl, code, ok := c.taskCommand(cmd, fs, args)
	if !ok {
		return code
	}
	tail, err := parseTail(*tailFlag)
	if err != nil {
		return c.usageFailure(cmd, fs, err)
	}
	p := newPrinter(c.stdout, c.stderr, quiet)
	f := &follower{
		cl: cl, id: id, p: p, follow: follow,
		minBackoff: c.minBackoff, maxBackoff: c.maxBackoff,
		reconnectTimeout: c.reconnectTimeout, noteEvery: c.reconnectNote,
	}
	if tail >= 0 {
		// What is stored so far goes through a buffer that keeps its last
		// lines; the follow, if any, goes on from where it ended.
		buf := &tailBuffer{n: tail}
		caught := *f
		caught.p, caught.follow = newPrinter(buf.stdout(), buf.stderr(), quiet), false
		if _, err := caught.run(ctx); err != nil {
			if errors.Is(err, errGaveUp) {
				c.gaveUp(p, cl, id, err)
				return exitPodium
			}
			p.fail("%s", cl.describe(err, fmt.Sprintf("no task %s", id)))
			return exitUsageIfNotFound(err)
		}
		mid, err := buf.writeTo(c.stdout, c.stderr)
		if err != nil {
			p.fail("%v", err)
			return exitPodium
		}
		p.midLine, p.ended = mid, caught.p.ended
		f.lastSeq, f.reached = caught.lastSeq, true
		if !follow {
			return exitOK
		}
	}
	final, err := f.run(ctx)
	if errors.Is(err, errGaveUp) {
		c.gaveUp(p, cl, id, err)
		return exitPodium
	}
	if err != nil {
		p.fail("%s", cl.describe(err, fmt.Sprintf("no task %s", id)))
		return exitUsageIfNotFound(err)
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
