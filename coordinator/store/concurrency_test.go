package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// Two dispatch passes at once, as an old leader finishing its last pass and
// the new leader's first would be, cannot both fill a concurrency key's last
// slot: the second waits for the first's key lock, then sees its placement.
func TestConcurrencyLimitHoldsAcrossOverlappingPasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	spec := func() *podiumv1.TaskSpec {
		return &podiumv1.TaskSpec{Image: "busybox", Concurrency: &podiumv1.Concurrency{Key: "deploy-prod", Limit: 1, OnConflict: "queue"}}
	}
	if _, err := st.InsertTasks(ctx, []store.NewTask{{ID: "task_first", Spec: spec()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertTasks(ctx, []store.NewTask{{ID: "task_second", Spec: spec()}}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		placed  []store.Placement
		waiting int
		err     error
	}
	second := make(chan result, 1)
	placed, _, err := st.DispatchPass(ctx, 1, func(store.Claimed) store.Verdict {
		// The first pass holds task_first and the key's lock: a second pass
		// now claims task_second and must wait for the lock.
		go func() {
			p, w, err := st.DispatchPass(ctx, 1, func(store.Claimed) store.Verdict { return store.Verdict{NodeID: "node_a"} })
			second <- result{p, w, err}
		}()
		wait.For(t, 30*time.Second, "the second pass to wait for the key's lock", func() bool {
			var n int
			err := sql.QueryRow(ctx, `select count(*) from pg_locks where locktype = 'advisory' and not granted
				and database = (select oid from pg_database where datname = current_database())`).Scan(&n)
			return err == nil && n == 1
		})
		return store.Verdict{NodeID: "node_a"}
	})
	if err != nil || len(placed) != 1 || placed[0].TaskID != "task_first" {
		t.Fatalf("first pass placed %v (%v), want task_first", placed, err)
	}
	r := wait.Recv(t, 30*time.Second, "the second pass to end", second)
	if r.err != nil || len(r.placed) != 0 || r.waiting != 1 {
		t.Fatalf("second pass placed %v, %d waiting (%v); want nothing placed, task_second waiting", r.placed, r.waiting, r.err)
	}
	got, err := st.GetTask(ctx, "task_second")
	if err != nil {
		t.Fatal(err)
	}
	if want := "concurrency key deploy-prod is at its limit (1 running: task_first)"; got.State != store.Queued || got.Reason != want {
		t.Fatalf("task_second is %s, %q; want queued, %q", got.State, got.Reason, want)
	}
}

// Tasks already told their key is at its limit are not claimed again while it
// is, so a long line of one key's tasks does not fill a pass's batch ahead of
// other work; once the key has room they are, and the next one starts.
func TestTasksWaitingOnAKeyDoNotFillThePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"task_k1", "task_k2", "task_k3", "task_plain"} {
		spec := &podiumv1.TaskSpec{Image: "busybox"}
		if id != "task_plain" {
			spec.Concurrency = &podiumv1.Concurrency{Key: "sweep", Limit: 1, OnConflict: "queue"}
		}
		if _, err := st.InsertTasks(ctx, []store.NewTask{{ID: id, Spec: spec}}); err != nil {
			t.Fatal(err)
		}
	}
	toA := func(store.Claimed) store.Verdict { return store.Verdict{NodeID: "node_a"} }
	ids := func(ps []store.Placement) (out []string) {
		for _, p := range ps {
			out = append(out, p.TaskID)
		}
		return out
	}
	placed, waiting, err := st.DispatchPass(ctx, 3, toA)
	if err != nil || len(placed) != 1 || placed[0].TaskID != "task_k1" || waiting != 2 {
		t.Fatalf("first pass placed %v, %d waiting (%v); want task_k1, 2 waiting", ids(placed), waiting, err)
	}
	placed, _, err = st.DispatchPass(ctx, 1, toA)
	if err != nil || len(placed) != 1 || placed[0].TaskID != "task_plain" {
		t.Fatalf("a pass of one placed %v (%v); want task_plain, past the key's waiting tasks", ids(placed), err)
	}
	if _, err := sql.Exec(ctx, "update podium.tasks set state = 'succeeded', finished_at = now() where id = 'task_k1'"); err != nil {
		t.Fatal(err)
	}
	placed, _, err = st.DispatchPass(ctx, 3, toA)
	if err != nil || len(placed) != 1 || placed[0].TaskID != "task_k2" {
		t.Fatalf("once task_k1 ended, the pass placed %v (%v); want task_k2", ids(placed), err)
	}
	got, err := st.GetTask(ctx, "task_k3")
	if err != nil {
		t.Fatal(err)
	}
	if want := "concurrency key sweep is at its limit (1 running: task_k2)"; got.Reason != want {
		t.Fatalf("task_k3 says %q, want %q", got.Reason, want)
	}
}
