package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A failed attempt its retry policy retries puts the task back in the queue
// with its wait in the row: no exit code (the task has not ended), no start
// (the timeout backstop counts from the next attempt's), the attempt ended,
// and not_before its backoff after that end by the database's clock. No pass
// places it before then; once the wait has ended (EndBackoffs), the next
// pass places it as attempt 2, saying so in its log.
func TestRetryWaitsInTheRowAndIsPlacedAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_t', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	spec := &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 60, MaxAttempts: 3,
		Retry: &podiumv1.RetryPolicy{Attempts: 3, OnExitCodes: []int32{1}, BackoffSeconds: 30, MaxBackoffSeconds: 300}}
	if _, err := st.InsertTask(ctx, newTask("task_r", spec, "me")); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `update podium.tasks set state = 'running', node_id = 'node_t', attempt = 1,
		started_at = now() - interval '1 hour' where id = 'task_r'`); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, "insert into podium.attempts (task_id, attempt, node_id) values ('task_r', 1, 'node_t')"); err != nil {
		t.Fatal(err)
	}
	exit := int32(1)
	res, err := st.IngestEvents(ctx, "node_t", 0, "task_r", 1, []*podiumv1.TaskEvent{{Seq: 1,
		Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "exit code 1", ExitCode: &exit}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Retried || res.Requeued || res.Terminal != "" {
		t.Fatalf("ingest result %+v, want retried", res)
	}
	task, err := st.GetTask(ctx, "task_r")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != store.Queued || task.ExitCode != nil || task.StartedAt != nil || task.NodeID != nil || task.NotBefore == nil ||
		!strings.HasPrefix(task.Reason, "attempt 2 of 3 after exit code 1, in ") {
		t.Fatalf("retried task: state %s, exit %v, started %v, node %v, not before %v, reason %q",
			task.State, task.ExitCode, task.StartedAt, task.NodeID, task.NotBefore, task.Reason)
	}
	var secs float64
	if err := sql.QueryRow(ctx, `select extract(epoch from t.not_before - a.finished_at)::float8 from podium.tasks t
		join podium.attempts a on a.task_id = t.id and a.attempt = 1 where t.id = 'task_r'`).Scan(&secs); err != nil {
		t.Fatal(err)
	}
	waits := time.Duration(secs * float64(time.Second))
	if waits < 30*time.Second || waits > 33*time.Second {
		t.Errorf("not_before is %s after the attempt ended, want the 30 s backoff plus at most a tenth", waits)
	}
	if touched, err := st.TimeOutTasks(ctx, time.Second); err != nil || len(touched) != 0 {
		t.Errorf("TimeOutTasks = %v, %v; want nothing to stop", touched, err)
	}

	place := func(store.Claimed) store.Verdict { return store.Verdict{NodeID: "node_t"} }
	if placed, waiting, err := st.DispatchPass(ctx, 10, place); err != nil || len(placed) != 0 || waiting != 0 {
		t.Fatalf("a pass during the backoff: placed %v, %d waiting, %v; want nothing claimed", placed, waiting, err)
	}
	if n, err := st.EndBackoffs(ctx); err != nil || n != 0 {
		t.Fatalf("EndBackoffs during the backoff = %d, %v; want 0", n, err)
	}
	// The backoff's time comes (moved, rather than waited for).
	if _, err := sql.Exec(ctx, "update podium.tasks set not_before = now() - interval '1 second' where id = 'task_r'"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.EndBackoffs(ctx); err != nil || n != 1 {
		t.Fatalf("EndBackoffs after the backoff = %d, %v; want 1", n, err)
	}
	placed, _, err := st.DispatchPass(ctx, 10, place)
	if err != nil || len(placed) != 1 || placed[0].Attempt != 2 {
		t.Fatalf("a pass after the backoff: placed %v, %v; want task_r as attempt 2", placed, err)
	}
	evs, err := st.ReadEvents(ctx, "task_r", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Event.GetStatus()
	if last.GetState() != podiumv1.TaskState_TASK_STATE_SCHEDULED || last.GetReason() != "assigned to node_t, attempt 2 of 3" {
		t.Errorf("the log's last status is %v, want scheduled: assigned to node_t, attempt 2 of 3", last)
	}
	if task, _ := st.GetTask(ctx, "task_r"); task.NotBefore != nil {
		t.Errorf("a placed task still has not_before %v", task.NotBefore)
	}
}

// A rerun's row names the task it reruns.
func TestInsertTaskRerunOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openStore(t)
	ts, err := st.InsertTasks(ctx, []store.NewTask{{ID: "task_new", Spec: &podiumv1.TaskSpec{Image: "busybox"}, RerunOf: "task_old"},
		{ID: "task_plain", Spec: &podiumv1.TaskSpec{Image: "busybox"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].RerunOf == nil || *ts[0].RerunOf != "task_old" || ts[1].RerunOf != nil {
		t.Fatalf("inserted rerun_of %v and %v, want task_old and none", ts[0].RerunOf, ts[1].RerunOf)
	}
	got, err := st.GetTask(ctx, "task_new")
	if err != nil {
		t.Fatal(err)
	}
	if got.Proto().GetRerunOf() != "task_old" {
		t.Errorf("stored rerun_of %v, want task_old", got.RerunOf)
	}
}
