package store_test

import (
	"context"
	"testing"
)

// A task lost with its node ends its attempt too: the attempt's row gets
// its end, as a requeued one's does, so that nothing reads it as still
// running (podium.usage counts attempts by the day they ended, and left out
// every lost one). The chaos soak found lost tasks with their attempt open.
func TestLostTaskEndsItsAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 1, 1)
	task := tasks[0]
	if _, err := f.sql.Exec(ctx, "update podium.nodes set status = 'offline' where id = $1", f.onNode[task]); err != nil {
		t.Fatal(err)
	}
	changed, err := f.st.LoseTasksOfOfflineNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0] != task {
		t.Fatalf("lost %v; want the task on the offline node, %s", changed, task)
	}
	var state string
	var open bool
	if err := f.sql.QueryRow(ctx, `select t.state, a.finished_at is null from podium.tasks t
		join podium.attempts a on a.task_id = t.id and a.attempt = t.attempt where t.id = $1`, task).Scan(&state, &open); err != nil {
		t.Fatal(err)
	}
	if state != "lost" || open {
		t.Fatalf("task %s, its attempt open: %v; want lost with its attempt ended", state, open)
	}
	var attempts int64
	if err := f.sql.QueryRow(ctx, "select coalesce(sum(attempts), 0) from podium.usage").Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Fatalf("podium.usage counts %d attempts; want the lost one", attempts)
	}
}
