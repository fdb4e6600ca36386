// Command podium-runner is PID 1 of every Podium task and sidecar container:
// it runs the command, forwards signals, reaps orphans and writes the
// command's output and exit status to a runner log on the host, which the
// agent tails. Inside a task, `podium-runner ask` reads the next message sent
// to the task, and `podium-runner artifact add PATH [--name NAME]` publishes a
// file as an artifact, uploaded when the task exits. See package agent/runner.
//
// Build it static (CGO_ENABLED=0; `make build` does) and install it next to
// podium-agent: the agent bind-mounts it into containers whose images may
// have no C library at all.
package main

import (
	"os"

	"github.com/podiumhq/podium/agent/runner"
)

func main() {
	os.Exit(runner.Main(os.Args[1:], os.Stdout, os.Stderr))
}
