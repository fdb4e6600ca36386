package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openStore(t *testing.T) (*store.Store, pgtest.Database) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, db
}

// newTask is the row the submit path stores for spec (tasks.NewRow), its
// cost included, under the id the test chose.
func newTask(id string, spec *podiumv1.TaskSpec, requestedBy string) store.NewTask {
	nt := tasks.NewRow(spec, requestedBy)
	nt.ID = id
	return nt
}

// rawSQL is a pool of the test's own on a database, for what a test sets up
// or checks behind the store's back. Production code has no such door: the
// store is its only way to Postgres.
func rawSQL(t *testing.T, db pgtest.Database) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestInsertTasksStoresEveryColumnInInputOrderAndRingsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)

	// A second session listens, as the scheduler's bus does.
	lc, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(ctx)
	if _, err := lc.Exec(ctx, "listen "+store.ChannelSubmit+"; listen marker"); err != nil {
		t.Fatal(err)
	}

	var in []store.NewTask
	for i := range 50 {
		spec := &podiumv1.TaskSpec{Image: fmt.Sprintf("busybox:%d", i), Priority: int32(i % 7), MaxAttempts: int32(i % 4), RetryOnNodeLoss: i%2 == 0}
		if i%3 != 0 { // every third task has no labels, which protojson leaves out
			spec.Labels = []string{"gpu", fmt.Sprintf("zone-%d", i)}
		}
		spec.Resources = &podiumv1.Resources{Cpu: float64(i) / 4, MemoryMb: int64(i * 64)}
		if i%5 == 0 {
			spec.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 256}}}
		}
		in = append(in, tasks.NewRow(spec, fmt.Sprintf("user-%d", i)))
	}
	out, err := st.InsertTasks(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("got %d tasks back, want %d", len(out), len(in))
	}
	for i, got := range out {
		want := in[i]
		if got.ID != want.ID || got.Spec.GetImage() != want.Spec.GetImage() {
			t.Fatalf("result %d is %s (%s), want %s (%s): results must come back in input order",
				i, got.ID, got.Spec.GetImage(), want.ID, want.Spec.GetImage())
		}
		if got.State != store.Queued || got.RequestedBy != want.RequestedBy || got.Priority != want.Spec.GetPriority() ||
			got.RetryOnNodeLoss != want.Spec.GetRetryOnNodeLoss() || got.MaxAttempts != max(want.Spec.GetMaxAttempts(), 1) {
			t.Errorf("task %d came back as %+v, want queued, by %s, priority %d, retry %v, max attempts %d (at least 1)", i, got,
				want.RequestedBy, want.Spec.GetPriority(), want.Spec.GetRetryOnNodeLoss(), max(want.Spec.GetMaxAttempts(), 1))
		}

		// What placement reads is kept beside the spec; check it in the table.
		var labels []string
		var cpu float64
		var mem int64
		if err := sql.QueryRow(ctx, "select labels, cpu, memory_mb from podium.tasks where id = $1", want.ID).Scan(&labels, &cpu, &mem); err != nil {
			t.Fatal(err)
		}
		wantLabels := want.Spec.GetLabels()
		if wantLabels == nil {
			wantLabels = []string{}
		}
		wantCPU, wantMem := placement.Cost(want.Spec)
		if !slices.Equal(labels, wantLabels) || cpu != wantCPU || mem != wantMem {
			t.Errorf("task %d stored labels %q, cpu %v, memory %d MB; want %q, %v, %d", i, labels, cpu, mem, wantLabels, wantCPU, wantMem)
		}
	}

	// Exactly one doorbell for the batch: the marker is notified after the
	// insert committed, so everything before it in the queue is the insert's.
	if _, err := sql.Exec(ctx, "select pg_notify('marker', '')"); err != nil {
		t.Fatal(err)
	}
	rings := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for notifications: %v", err)
		}
		if n.Channel == "marker" {
			break
		}
		rings++
	}
	if rings != 1 {
		t.Fatalf("the batch rang %s %d times, want once", store.ChannelSubmit, rings)
	}
}

func TestInsertTasksIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := openStore(t)
	first, err := st.InsertTask(ctx, newTask(ids.New("task"), &podiumv1.TaskSpec{Image: "busybox"}, "me"))
	if err != nil {
		t.Fatal(err)
	}
	// The second batch reuses the first task's id: the whole batch is refused.
	_, err = st.InsertTasks(ctx, []store.NewTask{
		{ID: ids.New("task"), Spec: &podiumv1.TaskSpec{Image: "busybox"}},
		{ID: first.ID, Spec: &podiumv1.TaskSpec{Image: "busybox"}},
	})
	if err == nil {
		t.Fatal("a batch with a duplicate id was stored")
	}
	var n int
	if err := rawSQL(t, db).QueryRow(ctx, "select count(*) from podium.tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d tasks stored after a refused batch, want the 1 from before it", n)
	}
	if out, err := st.InsertTasks(ctx, nil); err != nil || out != nil {
		t.Fatalf("an empty batch gave %v, %v; want nothing and no error", out, err)
	}
}
