package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Rerun answers as the coordinator does: a new task linked to the old one,
// or, for f.rerunErr, that error.
func (f *fake) Rerun(_ context.Context, req *connect.Request[podiumv1.RerunRequest]) (*connect.Response[podiumv1.RerunResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reruns = append(f.reruns, req.Msg)
	if f.rerunErr != nil {
		return nil, f.rerunErr
	}
	return connect.NewResponse(&podiumv1.RerunResponse{Task: &podiumv1.Task{Id: "task_01RERUN", RerunOf: req.Msg.GetId(),
		State: podiumv1.TaskState_TASK_STATE_QUEUED}}), nil
}

func onAttempt(ev *podiumv1.TaskEvent, attempt int32) *podiumv1.TaskEvent {
	ev.Attempt = attempt
	return ev
}

// podium run follows a task across its attempts, shows the line the
// coordinator writes before each retry, and exits with the last attempt's
// exit code, not the first's.
func TestRunFollowsAcrossAttemptsAndExitsWithTheLast(t *testing.T) {
	f := newFake(t)
	f.task = &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_QUEUED, NodeId: "node_A", Attempt: 2}
	f.events = []*podiumv1.TaskEvent{
		statusEv(podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0),
		stdoutEv("first try\n"),
		statusEv(podiumv1.TaskState_TASK_STATE_QUEUED, "attempt 2 of 2 after exit code 3, in 10 s", nil, 0),
		onAttempt(statusEv(podiumv1.TaskState_TASK_STATE_SCHEDULED, "assigned to node_A, attempt 2 of 2", nil, 0), 2),
		onAttempt(statusEv(podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0), 2),
		onAttempt(stdoutEv("second try\n"), 2),
		onAttempt(statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(4), 0), 2),
	}
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		f.setTask(func(t *podiumv1.Task) { t.State, t.ExitCode = podiumv1.TaskState_TASK_STATE_FAILED, i32(4) })
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), len(f.events)); err != nil {
			return err
		}
		return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
	}
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3", "--", "sh", "-c", "flaky")
	if code != 4 {
		t.Fatalf("exit %d, want 4 (the last attempt's); stderr:\n%s", code, tc.errOut)
	}
	if got, want := tc.out.String(), "first try\nsecond try\n"; got != want {
		t.Errorf("stdout = %q, want both attempts' output, %q", got, want)
	}
	wantErr := "→ task task_01TEST submitted\n" +
		"→ running\n" +
		"→ queued: attempt 2 of 2 after exit code 3, in 10 s\n" +
		"→ scheduled: assigned to node_A, attempt 2 of 2\n" +
		"→ running on node_A\n" +
		"→ failed: exit code 4\n"
	if got := tc.errOut.String(); got != wantErr {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, wantErr)
	}
}

// podium task rerun prints the new task's id on stdout and how to follow it
// on stderr; a refusal (the task is still running) is printed as the
// coordinator words it, with exit code 125.
func TestTaskRerun(t *testing.T) {
	f := newFake(t)
	tc := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := tc.run(t, "task", "rerun", "task_01TEST"); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, tc.errOut)
	}
	if len(f.reruns) != 1 || f.reruns[0].GetId() != "task_01TEST" {
		t.Errorf("Rerun requests = %v", f.reruns)
	}
	if got := tc.out.String(); got != "task_01RERUN\n" {
		t.Errorf("stdout = %q, want the new task's id alone", got)
	}
	if !strings.Contains(tc.errOut.String(), "task task_01RERUN submitted as a rerun of task_01TEST (follow it with: podium logs -f task_01RERUN)") {
		t.Errorf("stderr = %q", tc.errOut)
	}

	f.rerunErr = connect.NewError(connect.CodeFailedPrecondition, errors.New("task task_01TEST is running, not finished: only a finished task can be rerun"))
	tc = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := tc.run(t, "task", "rerun", "task_01TEST"); code != exitPodium || !strings.Contains(tc.errOut.String(), "is running, not finished") {
		t.Errorf("refused rerun: exit %d, stderr %q; want 125 and the reason", code, tc.errOut)
	}
	tc = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := tc.run(t, "task", "rerun"); code != exitUsage || len(f.reruns) != 2 {
		t.Errorf("rerun without an id: exit %d after %d requests; want a usage error and nothing sent", code, len(f.reruns))
	}
}

// podium task get shows the retry policy, the attempt out of how many, when
// the next one starts, and what a rerun reruns.
func TestTaskGetShowsRetryAndRerun(t *testing.T) {
	f := newFake(t)
	now := time.Now()
	f.task = &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_QUEUED, Attempt: 1, RerunOf: "task_01OLD",
		NextAttemptAt: timestamppb.New(now.Add(30 * time.Second)), Reason: "attempt 2 of 3 after exit code 1, in 30 s",
		Spec: &podiumv1.TaskSpec{Image: "alpine:3", MaxAttempts: 3,
			Retry: &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1, 137}, OnOom: true, BackoffSeconds: 30, MaxBackoffSeconds: 300}}}
	tc := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := tc.run(t, "task", "get", "task_01TEST"); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, tc.errOut)
	}
	out := tc.out.String()
	for _, want := range []string{
		"attempt:", "1 of 3", "next attempt:", "after the retry's backoff", "rerun of:", "task_01OLD",
		"retry:", "after exit code 1 or 137, or an out-of-memory kill; backoff 30s doubling to 5m0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("task get should show %q:\n%s", want, out)
		}
	}
}
