// Package runner is podium-runner, the small static program the agent
// bind-mounts read-only into every task and sidecar container and runs there
// as PID 1.
//
// It does what an init does — runs the task's command in its own process
// group, forwards signals to that group, reaps orphans — and one thing more:
// it writes everything the command prints, and finally how it exited, to a
// runner log (package runlog) in a file that lives on the host. The agent
// tails that file. Because the runner, not the agent, holds the container's
// output pipes, an agent that crashes or is upgraded loses nothing and tasks
// keep running without it.
//
// Inside a task it also offers `podium-runner ask`, which prints the next
// message people sent the task (package inbox), and `podium-runner artifact
// add`, which publishes a file as one of the task's artifacts (package
// artifacts).
//
// The package imports nothing outside the standard library, the small agent
// packages that define the files it shares with the agent and
// internal/version, so the binary stays small and builds with CGO_ENABLED=0
// into a static executable that runs in any image, even one built FROM
// scratch.
package runner

import (
	"fmt"
	"io"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/internal/version"
)

// Where things are inside a container the agent starts.
const (
	// Dir is the directory the runner binary is mounted in. The agent
	// appends it to the task's PATH, so `podium-runner ask` works without a
	// path.
	Dir = "/podium"
	// Path is the runner binary inside the container.
	Path = Dir + "/podium-runner"
	// LogPath is where the container's runner log is mounted.
	LogPath = Dir + "/log/output.log"
	// ProgressPath is where the agent's progress file for that log is
	// mounted, read-only (package runlog).
	ProgressPath = Dir + "/log/progress"
	// LeasePath is where the agent's lease file for the task is mounted,
	// read-only (package runlog): when it runs out, the runner fences the
	// task.
	LeasePath = Dir + "/log/lease"
)

// Exit codes of the runner itself, when it cannot run the command at all.
// They follow the shell's and docker run's conventions so a person reading an
// exit status recognises them.
const (
	ExitUsage       = 2
	ExitRunnerError = 125 // the runner could not do its job (no log file, say)
	ExitCannotExec  = 126 // the command exists but could not be executed
	ExitNotFound    = 127 // the command does not exist
	// ExitDiskFull is what run exits with when it stopped the command
	// because the log had no room for its output for --disk-full-after.
	ExitDiskFull = 124
	// ExitNoMessage is what ask exits with when its --timeout ran out.
	ExitNoMessage = 1
)

const usage = `podium-runner is PID 1 of every Podium task container.

Usage:
  podium-runner run [--log FILE] [--path-append DIR] [--output-limit BYTES]
                    [--progress FILE --backlog BYTES] [--disk-full-after DURATION]
                    [--lease FILE]
                    -- COMMAND [ARG]...
  podium-runner ask [--inbox DIR] [--timeout DURATION]
  podium-runner artifact add PATH [--name NAME]
  podium-runner version

run    runs COMMAND, writing its output and exit status to the runner log FILE
       (default ` + LogPath + `), forwarding signals and reaping orphans.
       With --output-limit it writes at most that many bytes of output (and
       one more if there was more) and drops the rest; with --progress it
       holds the output back, and so the command, while more than --backlog
       bytes of the log are unread by the agent. With --disk-full-after it
       stops the command, and exits with 124, once the log has had no room
       for its output for that long. With --lease it stops the command
       (SIGTERM, then SIGKILL after the lease's grace) once the moment the
       agent's lease file holds has passed: the agent, hung or cut off, can
       no longer fence the task itself.
ask    prints the next unread message sent to this task with "podium task
       send" and exits; it waits for one if there is none yet. Messages are
       read in the order they were sent, each once.
artifact add
       copies PATH into the task's artifacts directory,
       ` + artifacts.ContainerDir + `, as NAME (default: PATH's base
       name; "reports/junit.xml" makes a subdirectory). Everything in that
       directory is uploaded when the task exits; later changes to PATH are
       not. Adding a NAME again replaces the copy.
`

// Main runs the command line args (without the program name) and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:], stderr)
	case "ask":
		return ask(args[1:], stdout, stderr)
	case "artifact":
		return artifact(args[1:], stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version.Version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "podium-runner: unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}
