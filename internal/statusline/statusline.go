// Package statusline words a task's state changes the one way every face of
// Podium shows them — podium run's and podium logs' "→" lines, podium wait,
// and the console's log — so that a person reads the same sentence
// wherever they look: "failed: exit code 3", "running on node_…",
// "cancelled: killed by signal 15 (SIGTERM): by alice".
package statusline

import (
	"fmt"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// State is a state as people write it: "running", not TASK_STATE_RUNNING.
func State(s podiumv1.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATE_"))
}

// OnNode reports whether a task in state s has a node: scheduled,
// provisioning or running.
func OnNode(s podiumv1.TaskState) bool {
	switch s {
	case podiumv1.TaskState_TASK_STATE_SCHEDULED, podiumv1.TaskState_TASK_STATE_PROVISIONING, podiumv1.TaskState_TASK_STATE_RUNNING:
		return true
	}
	return false
}

// Line words a state change: its state, the node it is on (node, when
// given and the state has one), how it ended (a signal, or an exit code
// that is not a success's 0), and the reason — each said once: the
// coordinator's reason often says some of it already ("assigned to node_…",
// "exit code 3").
func Line(state podiumv1.TaskState, reason string, exitCode *int32, signal int32, node string) string {
	reason = strings.TrimSpace(reason)
	line := State(state)
	if node != "" && OnNode(state) && !strings.Contains(reason, node) {
		line += " on " + node
	}
	switch {
	case signal > 0 && state != podiumv1.TaskState_TASK_STATE_SUCCEEDED:
		line += ": killed by " + SignalName(signal)
	case exitCode != nil && (*exitCode != 0 || state == podiumv1.TaskState_TASK_STATE_FAILED):
		line += fmt.Sprintf(": exit code %d", *exitCode)
	}
	if reason != "" && !strings.Contains(strings.ToLower(line), strings.ToLower(reason)) {
		line += ": " + reason
	}
	return line
}

// SignalName is "signal 9 (SIGKILL)", or "signal N" for one without a
// common name.
func SignalName(n int32) string {
	names := map[int32]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
		9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}
	if name, ok := names[n]; ok {
		return fmt.Sprintf("signal %d (%s)", n, name)
	}
	return fmt.Sprintf("signal %d", n)
}
