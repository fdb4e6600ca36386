package dispatch_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// The store's claim (store.DispatchPass, DispatchPassFIFO) executes in SQL
// the order this package states in Go (Order, OrderFIFO). On a random queue
// of several sharers, users and groups, with weights, priorities, tasks
// already holding slots, and ties of age, every pass offers the tasks in
// the order Order gives, and a pass of a smaller batch offers its first
// tasks. Nothing is placed, so every pass sees the same queue.
func TestClaimOrderIsDispatchOrder(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, queue, sharers := seedQueue(t, rand.New(rand.NewPCG(seed, seed)))
			for _, tc := range []struct {
				name string
				pass func(context.Context, int, store.PlaceFunc) ([]store.Placement, int, error)
				want []dispatch.Queued
			}{
				{"fair share", st.DispatchPass, dispatch.Order(queue, sharers)},
				{"fifo", st.DispatchPassFIFO, dispatch.OrderFIFO(queue)},
			} {
				for _, batch := range []int{len(queue), 17} {
					var offered []string
					_, waiting, err := tc.pass(ctx, batch, func(c store.Claimed) store.Verdict {
						offered = append(offered, c.ID)
						return store.Verdict{Why: "test: not placed"}
					})
					if err != nil || waiting != batch {
						t.Fatalf("%s, batch %d: %d waiting, %v; want all %d claimed and waiting", tc.name, batch, waiting, err, batch)
					}
					if want := ids(tc.want[:batch]); !slices.Equal(offered, want) {
						t.Errorf("%s, batch %d: the claim offered\n%v\nwant (dispatch's order)\n%v", tc.name, batch, offered, want)
					}
				}
			}
		})
	}
}

// seedQueue stores a random queue of 150 tasks, from five submitters, some
// in one of two groups, at a few priorities and ages that often tie, with a
// random number of each sharer's tasks already running; bob, carol and group
// ml have weights. It returns the queue and the sharers as Order takes them.
func seedQueue(t *testing.T, rng *rand.Rand) (*store.Store, []dispatch.Queued, map[string]dispatch.Sharer) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sql, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sql.Close(context.Background()) })

	sharers := map[string]dispatch.Sharer{}
	for name, weight := range map[string]int32{"bob": 2, "carol": 3} {
		h := sha256.Sum256([]byte(name))
		if _, err := st.AddUser(ctx, name, "member", h[:], "root"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SetUserWeight(ctx, name, weight); err != nil {
			t.Fatal(err)
		}
		sharers[name] = dispatch.Sharer{Weight: weight}
	}
	if _, err := st.SetGroupWeight(ctx, "ml", 2, "root"); err != nil {
		t.Fatal(err)
	}
	sharers["group ml"] = dispatch.Sharer{Weight: 2}

	// A user named like a group is a sharer of its own.
	submitters := []string{"alice", "bob", "carol", "dave", "ml"}
	groups := []string{"", "", "", "ml", "ops"}
	priorities := []int32{0, 0, 0, 1, 3}
	sharerOf := func(by, group string) string {
		if group != "" {
			return "group " + group
		}
		return by
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var queue []dispatch.Queued
	var news []store.NewTask
	created := map[string]time.Time{}
	for i := range 150 {
		by, group := submitters[rng.IntN(len(submitters))], groups[rng.IntN(len(groups))]
		q := dispatch.Queued{ID: fmt.Sprintf("task_%03d", i), Sharer: sharerOf(by, group),
			Priority: priorities[rng.IntN(len(priorities))], CreatedAt: t0.Add(time.Duration(rng.IntN(40)) * time.Second)}
		queue = append(queue, q)
		created[q.ID] = q.CreatedAt
		news = append(news, store.NewTask{ID: q.ID, RequestedBy: by,
			Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: q.Priority, Group: group}})
	}
	var running []string
	for i, by := range submitters {
		for j := range rng.IntN(6) {
			group := groups[(i+j)%len(groups)]
			id := fmt.Sprintf("run_%s_%d", by, j)
			news = append(news, store.NewTask{ID: id, RequestedBy: by, Spec: &podiumv1.TaskSpec{Image: "busybox", Group: group}})
			running = append(running, id)
			s := sharers[sharerOf(by, group)]
			s.Running++
			sharers[sharerOf(by, group)] = s
		}
	}
	if _, err := st.InsertTasks(ctx, news); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	if _, err := sql.Exec(ctx, `update podium.tasks set state = 'running', node_id = 'node_a', attempt = 1,
		scheduled_at = now(), started_at = now() where id = any($1)`, running); err != nil {
		t.Fatal(err)
	}
	for id, at := range created {
		if _, err := sql.Exec(ctx, "update podium.tasks set created_at = $2 where id = $1", id, at); err != nil {
			t.Fatal(err)
		}
	}
	return st, queue, sharers
}
