package statusline

import (
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func ptr(n int32) *int32 { return &n }

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		state  podiumv1.TaskState
		reason string
		exit   *int32
		signal int32
		node   string
		want   string
	}{
		{podiumv1.TaskState_TASK_STATE_QUEUED, "no node has label gpu", nil, 0, "", "queued: no node has label gpu"},
		{podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0, "node_A", "running on node_A"},
		{podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0, "", "running"},
		{podiumv1.TaskState_TASK_STATE_SUCCEEDED, "", ptr(0), 0, "node_A", "succeeded"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "", ptr(3), 0, "", "failed: exit code 3"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "out of memory", ptr(137), 9, "", "failed: killed by signal 9 (SIGKILL): out of memory"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "image not found", nil, 0, "", "failed: image not found"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "", nil, 64, "", "failed: killed by signal 64"},
		{podiumv1.TaskState_TASK_STATE_CANCELLED, "by alice", nil, 15, "", "cancelled: killed by signal 15 (SIGTERM): by alice"},
		{podiumv1.TaskState_TASK_STATE_LOST, "node offline", nil, 0, "", "lost: node offline"},
		// The reason is not repeated where it says what the line says.
		{podiumv1.TaskState_TASK_STATE_SCHEDULED, "assigned to node_A", nil, 0, "node_A", "scheduled: assigned to node_A"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "exit code 3", ptr(3), 0, "", "failed: exit code 3"},
		{podiumv1.TaskState_TASK_STATE_FAILED, "killed by signal 9", nil, 9, "", "failed: killed by signal 9 (SIGKILL)"},
	} {
		if got := Line(tc.state, tc.reason, tc.exit, tc.signal, tc.node); got != tc.want {
			t.Errorf("Line(%v, %q, …) = %q, want %q", tc.state, tc.reason, got, tc.want)
		}
	}
}
