package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// Only the leader expires: a standby started with a shorter --retain-tasks
// leaves a task alone while the leader (keeping tasks 90 days) runs its
// passes, and expires it once it leads.
func TestRetentionRunsOnTheLeaderOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := coordtest.Start(t, db.URL, coordtest.Options{Retention: retention.Config{Every: 20 * time.Millisecond}})
	coordtest.Eventually(t, 10*time.Second, "replica a to lead", a.Leading)
	b := coordtest.Start(t, db.URL, coordtest.Options{Retention: retention.Config{Tasks: time.Hour, Every: 20 * time.Millisecond}})

	if _, err := conn.Exec(ctx, `insert into podium.tasks (id, spec, state, finished_at)
		values ('task_twohoursold', '{"image":"busybox"}', 'succeeded', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	// A pass of the leader's is seen by what it removes: an expired token.
	// Tasks come first in a pass, so once a second token is gone a whole
	// pass has looked at the task, and kept it.
	for range 2 {
		if _, err := conn.Exec(ctx, `insert into podium.enrollment_tokens (token_hash, expires_at) values ('\x01', now() - interval '8 days')`); err != nil {
			t.Fatal(err)
		}
		coordtest.Eventually(t, 10*time.Second, "a pass of the leader", func() bool {
			return count("select count(*) from podium.enrollment_tokens") == 0
		})
	}
	if b.Leading() {
		t.Fatal("replica b leads too")
	}
	if n := count("select count(*) from podium.tasks where id = 'task_twohoursold'"); n != 1 {
		t.Fatal("the task was expired while the replica keeping tasks 90 days led")
	}
	a.Stop()
	coordtest.Eventually(t, 15*time.Second, "replica b to lead", b.Leading)
	coordtest.Eventually(t, 10*time.Second, "replica b to expire the task", func() bool {
		return count("select count(*) from podium.expired_tasks where id = 'task_twohoursold'") == 1
	})
}
