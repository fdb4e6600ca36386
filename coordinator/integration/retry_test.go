package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/dispatch"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// The retry tests run the real coordinator on a real Postgres with a
// simulated node that speaks the real node protocol: the retry rule is the
// control plane's, and a simulated node reports exactly the exit code a test
// needs. (test/e2e runs tasks on the real Docker engine.)

// retryCoordinator is a coordinator whose leader sweeps often, so a backoff
// ends (EndBackoffs) soon after its time, and a node with one slot.
func retryCoordinator(t *testing.T, ctx context.Context) (*coordtest.Replica, pgtest.Database, *simNode) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Dispatch: dispatch.Config{SweepInterval: 100 * time.Millisecond}})
	id, key := enroll(t, r)
	return r, db, connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
}

// runAttempt plays one attempt on the simulated node: it takes the next
// assignment, which must be of task at attempt want, reports it running,
// prints a line, and ends it with exit code exit (failed unless 0).
func runAttempt(t *testing.T, node *simNode, task string, want int32, exit int32) {
	t.Helper()
	a := assignOf(t, node)
	if a.TaskId != task || a.Attempt != want {
		t.Fatalf("assigned %s attempt %d, want %s attempt %d", a.TaskId, a.Attempt, task, want)
	}
	end := podiumv1.TaskState_TASK_STATE_FAILED
	if exit == 0 {
		end = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	}
	node.send(t,
		status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
		logEv(task, a.Attempt, 2, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, fmt.Sprintf("this is attempt %d\n", a.Attempt)),
		status(task, a.Attempt, 3, end, &exit))
}

// logLines is a task's log as podium run and podium logs print it: output
// as it is, every status and note as a "→ " line (statuses as
// "state: reason").
func logLines(evs []*podiumv1.EventsResponse) string {
	var b strings.Builder
	for _, m := range evs {
		switch body := m.GetEvent().GetBody().(type) {
		case *podiumv1.TaskEvent_Log:
			b.Write(body.Log.GetData())
		case *podiumv1.TaskEvent_Note:
			fmt.Fprintf(&b, "→ %s\n", body.Note.GetText())
		case *podiumv1.TaskEvent_Status:
			state := strings.ToLower(strings.TrimPrefix(body.Status.GetState().String(), "TASK_STATE_"))
			fmt.Fprintf(&b, "→ %s: %s\n", state, body.Status.GetReason())
		}
	}
	return b.String()
}

type attemptRow struct {
	attempt            int32
	assigned, finished time.Time
}

// storedAttempts reads a task's podium.attempts rows, in order.
func storedAttempts(t *testing.T, ctx context.Context, url, task string) []attemptRow {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `select attempt, assigned_at, coalesce(finished_at, 'infinity') from podium.attempts
		where task_id = $1 order by attempt`, task)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (attemptRow, error) {
		var a attemptRow
		return a, r.Scan(&a.attempt, &a.assigned, &a.finished)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A task that fails twice with a listed exit code, then succeeds, ends
// succeeded on its third attempt. Its log, followed from the submit to the
// end as podium run follows it, has each attempt's output and a line before
// each retry saying which attempt comes, why and when; each retry started
// no sooner than its backoff after the attempt before ended, by the
// database's own timestamps.
func TestRetryFailsTwiceThenSucceeds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, db, node := retryCoordinator(t, ctx)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox",
		Retry: &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1, 137}, BackoffSeconds: 1}})
	type followed struct {
		evs []*podiumv1.EventsResponse
		err error
	}
	done := make(chan followed, 1)
	go func() {
		evs, err := tryReadLog(ctx, r, task, true)
		done <- followed{evs, err}
	}()

	runAttempt(t, node, task, 1, 1)
	runAttempt(t, node, task, 2, 137)
	runAttempt(t, node, task, 3, 0)

	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	if tk.Attempt != 3 || tk.GetExitCode() != 0 || tk.NextAttemptAt != nil {
		t.Errorf("task ended on attempt %d, exit code %v, next attempt %v; want attempt 3, exit code 0, none", tk.Attempt, tk.ExitCode, tk.NextAttemptAt)
	}
	var f followed
	select {
	case f = <-done:
	case <-ctx.Done():
		t.Fatal("the follower did not end when the task did")
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	log := logLines(f.evs)
	for _, want := range []string{
		"this is attempt 1\n→ queued: attempt 2 of 3 after exit code 1, in 1 s\n",
		", attempt 2 of 3\n",
		"this is attempt 2\n→ queued: attempt 3 of 3 after exit code 137, in 2 s\n",
		", attempt 3 of 3\n",
		"this is attempt 3\n→ succeeded",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the followed log does not have %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "→ failed") {
		t.Errorf("a retried attempt's log says failed, as if the task had ended:\n%s", log)
	}

	atts := storedAttempts(t, ctx, db.URL, task)
	if len(atts) != 3 {
		t.Fatalf("%d attempts stored, want 3: %v", len(atts), atts)
	}
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		prev, next := atts[i], atts[i+1]
		if next.assigned.Before(prev.finished.Add(backoff)) {
			t.Errorf("attempt %d was assigned at %s, before attempt %d ended (%s) plus its backoff of %s",
				next.attempt, next.assigned.Format(time.RFC3339Nano), prev.attempt, prev.finished.Format(time.RFC3339Nano), backoff)
		}
	}
}

// A failure with an exit code the policy does not list ends the task: no
// second attempt, no retry line.
func TestRetryNotForAnUnlistedExitCode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, db, node := retryCoordinator(t, ctx)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox",
		Retry: &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1}, BackoffSeconds: 1}})
	runAttempt(t, node, task, 1, 2)
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	if tk.Attempt != 1 || tk.GetExitCode() != 2 {
		t.Errorf("task failed on attempt %d with exit code %v, want attempt 1 and exit code 2", tk.Attempt, tk.ExitCode)
	}
	if log := logLines(readLog(t, ctx, r, task)); strings.Contains(log, "attempt 2") {
		t.Errorf("the log announces a retry:\n%s", log)
	}
	if n := len(storedAttempts(t, ctx, db.URL, task)); n != 1 {
		t.Errorf("%d attempts stored, want 1", n)
	}
}

// The last attempt's failure ends the task with that attempt's exit code:
// what podium run exits with.
func TestRetryLastAttemptsExitCodeIsTheTasks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, _, node := retryCoordinator(t, ctx)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2,
		Retry: &podiumv1.RetryPolicy{BackoffSeconds: 1}}) // any non-zero code, max_attempts' budget
	runAttempt(t, node, task, 1, 3)
	runAttempt(t, node, task, 2, 4)
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	if tk.Attempt != 2 || tk.GetExitCode() != 4 {
		t.Errorf("task failed on attempt %d with exit code %v, want attempt 2 and exit code 4", tk.Attempt, tk.ExitCode)
	}
}

// A cancel while the task waits out its backoff ends it cancelled at once,
// and it never starts again: once the backoff it was waiting for has passed
// by the database's clock, a task submitted after it is placed and it is not.
func TestRetryCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, db, node := retryCoordinator(t, ctx)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox",
		Retry: &podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 3}}) // time enough to cancel in
	runAttempt(t, node, task, 1, 1)
	tk := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_QUEUED)
	if tk.NextAttemptAt == nil || !strings.Contains(tk.Reason, "attempt 2 of 3 after exit code 1") {
		t.Fatalf("task waiting for its retry: next attempt %v, reason %q", tk.NextAttemptAt, tk.Reason)
	}
	due := tk.NextAttemptAt.AsTime()

	res, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: task, Reason: "not needed"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.Task; got.State != podiumv1.TaskState_TASK_STATE_CANCELLED || got.NextAttemptAt != nil ||
		!strings.Contains(got.Reason, "cancelled during the backoff before attempt 2 of 3: not needed") {
		t.Fatalf("cancel answered %v, want the task cancelled during its backoff", got)
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	coordtest.Eventually(t, 10*time.Second, "the database's clock to pass the cancelled retry's time", func() bool {
		var passed bool
		return conn.QueryRow(ctx, "select now() > $1", due).Scan(&passed) == nil && passed
	})
	other := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	if a := assignOf(t, node); a.TaskId != other {
		t.Fatalf("the node was given %s attempt %d, want the task submitted after the cancel, %s", a.TaskId, a.Attempt, other)
	}
	var assigns int
	if err := conn.QueryRow(ctx, "select count(*) from podium.node_commands where task_id = $1 and kind = 'assign'", task).Scan(&assigns); err != nil {
		t.Fatal(err)
	}
	if tk := getTask(t, ctx, r, task); tk.State != podiumv1.TaskState_TASK_STATE_CANCELLED || tk.Attempt != 1 || assigns != 1 {
		t.Errorf("cancelled task: %v with %d assignments, want still cancelled on attempt 1 with 1 assignment", tk.State, assigns)
	}
}

// A bad retry policy is refused at submit naming the field, and nothing is
// stored.
func TestRetryBadSpecsRefused(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		retry *podiumv1.RetryPolicy
		says  []string
	}{
		{&podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{300}}, []string{"spec.retry.on_exit_codes[0]", "1 to 255"}},
		{&podiumv1.RetryPolicy{Attempts: 500}, []string{"spec.retry.attempts", "more than 100"}},
		{&podiumv1.RetryPolicy{OnOom: true}, []string{"spec.retry.attempts", "required"}},
		{&podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 7200}, []string{"spec.retry.backoff_seconds", "1h0m0s"}},
		{&podiumv1.RetryPolicy{Attempts: 3, BackoffSeconds: 60, MaxBackoffSeconds: 10}, []string{"spec.retry.max_backoff_seconds", "shorter than the backoff"}},
	} {
		_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Retry: tc.retry}}))
		wantRefused(t, fmt.Sprint(tc.retry), err, tc.says...)
	}
	_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", MaxAttempts: 2,
		Retry: &podiumv1.RetryPolicy{Attempts: 3}}}))
	wantRefused(t, "attempts differing from max_attempts", err, "spec.retry.attempts", "differs from spec.max_attempts 2")
	if n := taskCount(t, ctx, r); n != 0 {
		t.Errorf("%d tasks stored, want none", n)
	}
}

// podium task rerun: a finished task is submitted again as a new task of the
// caller's, with the same spec and rerun_of naming the old one; a task not
// finished is refused, and a member may not rerun someone else's task.
func TestRerun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Granted to every member, so that bob's refusal below is for the
	// task, not the secret.
	if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "db-password", Value: []byte("s3cret"),
		Allow: []string{"role:member"}})); err != nil {
		t.Fatal(err)
	}
	alice, bob := as(r, addUser(t, r, "alice", "member")), as(r, addUser(t, r, "bob", "member"))
	spec := &podiumv1.TaskSpec{Image: "busybox", Command: []string{"sh", "-c", "make test"}, Env: map[string]string{"CI": "1"},
		Labels: []string{"linux"}, Retry: &podiumv1.RetryPolicy{Attempts: 2, OnExitCodes: []int32{75}},
		Secrets: []*podiumv1.SecretRef{{Name: "db-password", Env: "PGPASSWORD"}}}
	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	old := sub.Msg.Task

	// Queued (no node has the label): not finished.
	_, err = alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "is queued, not finished") ||
		!strings.Contains(err.Error(), "podium task cancel "+old.Id) {
		t.Fatalf("rerun of a queued task: %v, want FailedPrecondition saying it is not finished and what to do", err)
	}
	if _, err := alice.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: old.Id})); err != nil {
		t.Fatal(err)
	}

	_, err = bob.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	wantDenied(t, "bob rerunning alice's task", err, "members may rerun only their own tasks")

	re, err := alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	if err != nil {
		t.Fatal(err)
	}
	nt := getTask(t, ctx, r, re.Msg.Task.Id)
	was := getTask(t, ctx, r, old.Id)
	if nt.Id == old.Id || nt.RerunOf != old.Id || nt.RequestedBy != "alice" || nt.State != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("rerun: %v, want a new queued task of alice's with rerun_of %s", nt, old.Id)
	}
	if !proto.Equal(nt.Spec, was.Spec) || len(nt.Spec.Secrets) != 1 || nt.Spec.Secrets[0].Name != "db-password" {
		t.Errorf("rerun's spec %v differs from the old task's %v, or lost its secret", nt.Spec, was.Spec)
	}
	if strings.Contains(nt.String(), "s3cret") {
		t.Errorf("the rerun carries a secret's value: %v", nt)
	}
	if was.RerunOf != "" {
		t.Errorf("the old task says it is a rerun of %q", was.RerunOf)
	}

	// An admin may rerun anyone's task; the new task is the admin's.
	adm, err := r.Tasks().Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	if err != nil {
		t.Fatal(err)
	}
	if adm.Msg.Task.RerunOf != old.Id || adm.Msg.Task.RequestedBy == "alice" {
		t.Errorf("admin's rerun: %v, want rerun_of %s and not alice's", adm.Msg.Task, old.Id)
	}
	// A secret deleted since is refused as at submit: the new task could
	// not be given it. To a member a missing secret reads as one they may
	// not use (which secrets exist is for admins to know); to an admin it
	// is missing.
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "db-password"})); err != nil {
		t.Fatal(err)
	}
	_, err = alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "may not use secret db-password") {
		t.Errorf("alice's rerun naming a deleted secret: %v, want PermissionDenied naming it", err)
	}
	_, err = r.Tasks().Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: old.Id}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no secret named db-password") {
		t.Errorf("the admin's rerun naming a deleted secret: %v, want FailedPrecondition naming it", err)
	}
	_, err = alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: "task_nope"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("rerun of a malformed id: %v, want InvalidArgument", err)
	}
}
