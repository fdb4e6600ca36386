package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/statusline"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// maxWaitTasks bounds podium wait's arguments: more than a page of podium
// tasks is a script better served by waiting in batches.
const maxWaitTasks = 1000

var waitCommand = &command{
	name:     "wait",
	synopsis: "ID...",
	summary:  "Wait until every task given has ended; exit with the worst of their codes.",
	detail: `
For scripts that start many tasks with podium run --detach: podium wait blocks
until each task given has ended (succeeded, failed, cancelled or lost), printing
one line per task on stdout as it finds it ended ("task_… failed: exit code
3"), in the order given, then exits with the worst outcome:

  0      every task succeeded
  130    some were cancelled, none failed
  N      some failed: the code podium run would have exited with for the
         first failed task in the order given (its exit code, or 128+N
         for signal N)
  125    some task was lost, failed without running (Podium's failure), or
         its state could not be learnt: as podium run, this beats the rest

so a failure beats a cancel, and an unknown outcome beats both. A task ID
the coordinator does not know is refused before anything is waited for.
podium wait follows each task's event stream (as podium logs -f does,
without printing the log), so it waits without polling and rides out a
coordinator restart.`,
	usageExit: exitUsage,
	run:       runWait,
}

// waitOutcome ranks how a task ended for podium wait: the higher the worse.
type waitOutcome int

const (
	waitSucceeded waitOutcome = iota
	waitCancelled
	waitFailed
	waitUnknown // lost, Podium's failure, or not learnt
)

// outcomeOf ranks an ended task and gives the code podium run would exit
// with for it.
func outcomeOf(t *podiumv1.Task) (waitOutcome, int) {
	code := exitCode(t)
	switch {
	case t.GetState() == podiumv1.TaskState_TASK_STATE_SUCCEEDED:
		return waitSucceeded, code
	case t.GetState() == podiumv1.TaskState_TASK_STATE_CANCELLED:
		return waitCancelled, code
	case t.GetState() == podiumv1.TaskState_TASK_STATE_FAILED && code != exitPodium:
		return waitFailed, code
	}
	return waitUnknown, exitPodium
}

func runWait(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) == 0 {
		return c.usageFailure(cmd, fs, errors.New("give the IDs of the tasks to wait for"))
	}
	if len(rest) > maxWaitTasks {
		return c.usageFailure(cmd, fs, fmt.Errorf("%d task IDs is more than %d: wait for them in batches", len(rest), maxWaitTasks))
	}
	var taskIDs []string
	for _, id := range rest {
		if !ids.Valid("task", id) {
			return c.usageFailure(cmd, fs, fmt.Errorf("%q is not a task ID (task_…, as podium run --detach prints)", clip(id)))
		}
		if !slices.Contains(taskIDs, id) {
			taskIDs = append(taskIDs, id)
		}
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	// Every task is looked up first, so that a mistyped ID fails the script
	// at once rather than after the others have ended.
	tasks := make([]*podiumv1.Task, len(taskIDs))
	for i, id := range taskIDs {
		resp, err := unary(ctx, cl, func(ctx context.Context, e *endpoint) (*connect.Response[podiumv1.GetResponse], error) {
			return e.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		})
		if err != nil {
			// 125 even for a task that does not exist: wait's other codes
			// are the tasks' own, and 2 may be one of them.
			fmt.Fprintf(c.stderr, "podium: %s\n", cl.describe(err, fmt.Sprintf("no task %s; nothing was waited for", id)))
			return exitPodium
		}
		tasks[i] = resp.Msg.GetTask()
	}
	worst, worstCode := waitSucceeded, exitOK
	for i, id := range taskIDs {
		t := tasks[i]
		if !terminal(t.GetState()) {
			// The log is read from where the task is now and thrown away:
			// only the task's end is wanted.
			p := newPrinter(io.Discard, io.Discard, true)
			f := &follower{
				cl: cl, id: id, p: p, follow: true, reached: true, lastSeq: t.GetLastSeq(),
				minBackoff: c.minBackoff, maxBackoff: c.maxBackoff,
				reconnectTimeout: c.reconnectTimeout, noteEvery: c.reconnectNote,
			}
			final, err := f.run(ctx)
			if errors.Is(err, errGaveUp) {
				c.gaveUp(newPrinter(io.Discard, c.stderr, false), cl, id, err)
				return exitPodium
			}
			if err != nil {
				// The outcome can no longer be learnt, the worst there is:
				// waiting for the rest would not change the code.
				fmt.Fprintf(c.stderr, "podium: waiting for task %s: %s\n", id, cl.describe(err, fmt.Sprintf("no task %s", id)))
				return exitPodium
			}
			t = final
		}
		fmt.Fprintf(c.stdout, "%s %s\n", id, oneLine(statusline.Line(t.GetState(), t.GetReason(), t.ExitCode, t.GetSignal(), ""), 200))
		if o, code := outcomeOf(t); o > worst {
			worst, worstCode = o, code
		}
	}
	return worstCode
}
