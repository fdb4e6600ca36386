package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func failedAt(seq uint64, exit int32) *podiumv1.TaskEvent {
	cpu := 1.5
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
		State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "exit code", ExitCode: &exit,
		Usage: &podiumv1.Usage{CpuSeconds: &cpu}}}}
}

// A failed attempt its task's retry policy retries becomes a move back to
// the queue with the backoff as its wait (jitter only adds), the retry line
// as its reason, and a result that frees the node's slot without saying the
// node gave the task back. The rest fail as before: an unlisted exit code,
// the last attempt, a task the control plane asked to stop.
func TestChooseNewRetriesAFailureTheTasksPolicyNames(t *testing.T) {
	t.Parallel()
	rule := &retryRule{policy: &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1}, BackoffSeconds: 10, MaxBackoffSeconds: 300}, maxAttempts: 3}
	for _, tc := range []struct {
		name    string
		attempt int32
		exit    int32
		cancel  string
		retried bool
		reason  string
		backoff time.Duration
	}{
		{"first attempt, listed code", 1, 1, "", true, "attempt 2 of 3 after exit code 1", 10 * time.Second},
		{"second attempt waits twice as long", 2, 1, "", true, "attempt 3 of 3 after exit code 1", 20 * time.Second},
		{"last attempt", 3, 1, "", false, "", 0},
		{"unlisted code", 1, 2, "", false, "", 0},
		{"cancel requested", 1, 1, "cancelled by alice", false, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locked := lockedRows{
				epochs:        map[string]int64{"node_a": 7},
				attempts:      map[attemptID]lockedAttempt{{"task_1", tc.attempt}: {node: "node_a"}},
				cancelReasons: map[string]string{},
				retries:       map[string]*retryRule{"task_1": rule},
			}
			if tc.cancel != "" {
				locked.cancelReasons["task_1"] = tc.cancel
			}
			p := chooseNew([]IngestItem{{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: tc.attempt,
				Events: []*podiumv1.TaskEvent{failedAt(1, tc.exit)}}}, locked)
			tr := p.taken[0].tr
			if !tc.retried {
				if tr == nil || tr.To != Failed || tr.RetryAfter != 0 {
					t.Fatalf("transition %+v, want failed", tr)
				}
				return
			}
			if tr == nil || tr.To != Queued || !slices.Equal(tr.From, Active) || tr.Attempt != tc.attempt {
				t.Fatalf("transition %+v, want queued from any active state on attempt %d", tr, tc.attempt)
			}
			// The line says the wait it is given, in whole seconds.
			if want := fmt.Sprintf("%s, in %d s", tc.reason, int(tr.RetryAfter/time.Second)); *tr.Reason != want {
				t.Errorf("reason %q, want %q", *tr.Reason, want)
			}
			if tr.ExitCode != nil {
				t.Errorf("the retry carries exit code %d onto the task, which has not ended", *tr.ExitCode)
			}
			if tr.RetryAfter < tc.backoff || tr.RetryAfter > tc.backoff+tc.backoff/10 {
				t.Errorf("waits %s, want %s plus at most a tenth of jitter", tr.RetryAfter, tc.backoff)
			}
			p.reserved("task_1", 1, Running)
			p.applyRound(p.statusRounds([]string{"task_1"})[0], map[string]bool{"task_1": true})
			r := p.out[0].Result
			if !r.Retried || r.Requeued || r.Terminal != "" || !p.atts[attemptID{"task_1", tc.attempt}].finished {
				t.Errorf("result %+v, attempt finished %v; want retried (not given back, not terminal) and the attempt ended",
					r, p.atts[attemptID{"task_1", tc.attempt}].finished)
			}
			// The retried attempt ended with the node's report: what it used
			// is kept with it, as for an attempt that ends its task.
			if u := p.atts[attemptID{"task_1", tc.attempt}].usage; u.GetCpuSeconds() != 1.5 {
				t.Errorf("the retried attempt's usage is %v, want the 1.5 CPU seconds its status reported", u)
			}
		})
	}
}
