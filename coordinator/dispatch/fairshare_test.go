package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// A node with five free slots and, queued before the leader's first pass,
// Alice's four tasks, then Bob's two, then one more of Bob's at a higher
// priority (submitted last). The pass fills the five slots in the order it
// takes the queue, which is what --fair-share says:
//
//   - off (Config.NoFairShare, what --fair-share=false sets): priority, then
//     submission order, whoever submitted: Bob's urgent task, then Alice's
//     four; Bob's two wait.
//   - on (the default): priority, then the owners' queues interleaved:
//     Bob's urgent task, then Alice's first, Bob's first, Alice's second,
//     Bob's second; Alice's last two wait.
func TestFairShareDecidesTheOrderOfEqualPriorityTasks(t *testing.T) {
	t.Parallel()
	queue := []struct {
		id, owner string
		priority  int32
	}{
		{"task_a1", "alice", 0}, {"task_a2", "alice", 0}, {"task_a3", "alice", 0}, {"task_a4", "alice", 0},
		{"task_b1", "bob", 0}, {"task_b2", "bob", 0},
		{"task_b_urgent", "bob", 5},
	}
	for _, tc := range []struct {
		name        string
		noFairShare bool
		placed      []string
	}{
		{"off", true, []string{"task_a1", "task_a2", "task_a3", "task_a4", "task_b_urgent"}},
		{"on", false, []string{"task_a1", "task_a2", "task_b1", "task_b2", "task_b_urgent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDatabase(t)
			ctx := context.Background()
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
			if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.StartSession(ctx, store.SessionStart{NodeID: "node_a", Replica: "r1", MaxTasks: 5}); err != nil {
				t.Fatal(err)
			}
			for _, q := range queue { // one at a time: each is submitted after the one before
				if _, err := st.InsertTask(ctx, store.NewTask{ID: q.id, Spec: &podiumv1.TaskSpec{Image: "busybox", Priority: q.priority}, RequestedBy: q.owner}); err != nil {
					t.Fatal(err)
				}
			}
			// The node never accepts: what the pass placed stays placed.
			runDispatcher(t, db, dispatch.Config{NoFairShare: tc.noFairShare, AckDeadline: time.Hour})

			var placed []string
			wait.For(t, 30*time.Second, "the first pass to fill the node's five slots", func() bool {
				rows, err := sql.Query(ctx, "select id from podium.tasks where state = $1 order by id", store.Scheduled)
				if err != nil {
					t.Fatal(err)
				}
				placed, err = pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				return len(placed) >= 5
			})
			if !slices.Equal(placed, tc.placed) {
				t.Errorf("with fair share %s the pass placed %v, want %v", tc.name, placed, tc.placed)
			}
		})
	}
}

// runDispatcher runs a dispatcher as the leader would, with its bus
// listening, until the test ends.
func runDispatcher(t *testing.T, db pgtest.Database, cfg dispatch.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{store.ChannelSubmit}}, bus.Deps{Log: log})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		st.Close()
	})
	wg.Go(func() { _ = b.Run(ctx) })
	wait.For(t, 30*time.Second, "the bus to listen", func() bool { return b.Ready() == nil })
	s := dispatch.New(cfg, dispatch.Deps{Store: st, Bus: b, Log: log})
	wg.Go(func() { _ = s.Run(ctx) })
}
