package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A spec stored before taskspec bounded timeouts to a year may hold one whose
// interval overflows Postgres's. The timeout sweep must still time out the
// other tasks, not fail on that one every time it runs.
func TestTimeOutTasksSurvivesAnUnboundedStoredTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_t', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	huge, short := ids.New("task"), ids.New("task")
	if _, err := st.InsertTasks(ctx, []store.NewTask{
		{ID: huge, Spec: &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 1 << 62}},
		{ID: short, Spec: &podiumv1.TaskSpec{Image: "busybox", TimeoutSeconds: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `update podium.tasks set state = 'running', node_id = 'node_t', attempt = 1,
		started_at = now() - interval '1 hour' where id = any($1)`, []string{huge, short}); err != nil {
		t.Fatal(err)
	}
	touched, err := st.TimeOutTasks(ctx, time.Second)
	if err != nil {
		t.Fatalf("TimeOutTasks: %v", err)
	}
	if len(touched) != 1 || touched[0].TaskID != short {
		t.Fatalf("timed out %v, want only %s (the one-second task)", touched, short)
	}
}
