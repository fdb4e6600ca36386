package store

import (
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// An attempt its node failed for a full disk (reason "node disk full", no
// exit code) or an engine it could not reach ("node engine down") is
// retried as a lost node is: under retry_on_node_loss while
// attempts remain, after a short wait, whatever the retry policy says. Without
// retry_on_node_loss, or on the last attempt, it fails as before; a task's
// own failure is not taken for the node's.
func TestChooseNewRetriesAnAttemptItsNodeFailed(t *testing.T) {
	t.Parallel()
	diskFull := &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED,
		Reason: "node disk full: the runner log has had no room for 5m0s"}
	engineDown := &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED,
		Reason: "node engine down: the task's container could not be created: Cannot connect to the Docker daemon"}
	exit1 := int32(1)
	ownFailure := &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "node disk full, said the task", ExitCode: &exit1}
	onNodeLoss := &retryRule{maxAttempts: 3, onNodeLoss: true}
	policyOnly := &retryRule{maxAttempts: 3, policy: &podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 10}}
	for _, tc := range []struct {
		name    string
		st      *podiumv1.StatusChange
		rule    *retryRule
		attempt int32
		retried bool
	}{
		{"retry_on_node_loss, attempts left", diskFull, onNodeLoss, 1, true},
		{"retry_on_node_loss, last attempt", diskFull, onNodeLoss, 3, false},
		{"no retry_on_node_loss, a retry policy", diskFull, policyOnly, 1, false},
		{"no rule at all", diskFull, nil, 1, false},
		{"the task's own exit code", ownFailure, onNodeLoss, 1, false},
		{"engine down, retry_on_node_loss, attempts left", engineDown, onNodeLoss, 1, true},
		{"engine down, no retry_on_node_loss", engineDown, policyOnly, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locked := lockedRows{
				epochs:        map[string]int64{"node_a": 7},
				attempts:      map[attemptID]lockedAttempt{{"task_1", tc.attempt}: {node: "node_a"}},
				cancelReasons: map[string]string{},
				retries:       map[string]*retryRule{},
			}
			if tc.rule != nil {
				locked.retries["task_1"] = tc.rule
			}
			ev := &podiumv1.TaskEvent{Seq: 1, Body: &podiumv1.TaskEvent_Status{Status: tc.st}}
			p := chooseNew([]IngestItem{{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: tc.attempt,
				Events: []*podiumv1.TaskEvent{ev}}}, locked)
			tr := p.taken[0].tr
			if !tc.retried {
				if tr == nil || tr.To != Failed || tr.Reason == nil || *tr.Reason != tc.st.GetReason() {
					t.Fatalf("transition %+v, want failed with the node's reason", tr)
				}
				return
			}
			if tr == nil || tr.To != Queued || tr.Attempt != tc.attempt {
				t.Fatalf("transition %+v, want queued on attempt %d", tr, tc.attempt)
			}
			if want := "attempt 2 of 3 after its node failed it (" + tc.st.GetReason(); !strings.HasPrefix(*tr.Reason, want) {
				t.Errorf("reason %q, want one starting %q", *tr.Reason, want)
			}
			if tr.RetryAfter < nodeFailureBackoff || tr.RetryAfter > nodeFailureBackoff+nodeFailureBackoff/10 {
				t.Errorf("waits %s, want %s plus at most a tenth of jitter", tr.RetryAfter, nodeFailureBackoff)
			}
		})
	}
}
