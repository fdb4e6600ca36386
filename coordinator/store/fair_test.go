package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fairFleet is a database with two simulated nodes of 5 slots each (10 in
// all), connected to a replica, as a leader's pass sees them.
func fairFleet(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	st, db := openStore(t)
	sql := rawSQL(t, db)
	for _, id := range []string{"node_a", "node_b"} {
		if _, err := sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ($1, $2)", id, []byte(id)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.StartSession(ctx, store.SessionStart{NodeID: id, Replica: "r1", MaxTasks: 5}); err != nil {
			t.Fatal(err)
		}
	}
	return st, sql
}

// submit stores n tasks of one submitter in one call, as a sweep submitted
// with one `podium run` of a file of specs would.
func submit(t *testing.T, st *store.Store, by string, n int) {
	t.Helper()
	submitIn(t, st, by, "", n)
}

// submitIn is submit with a spec's group ("" for none).
func submitIn(t *testing.T, st *store.Store, by, group string, n int) {
	t.Helper()
	ts := make([]store.NewTask, n)
	for i := range ts {
		ts[i] = store.NewTask{ID: fmt.Sprintf("task_%s_%04d", by, i), Spec: &podiumv1.TaskSpec{Image: "busybox", Group: group}, RequestedBy: by}
	}
	if _, err := st.InsertTasks(context.Background(), ts); err != nil {
		t.Fatalf("submit %d tasks as %s: %v", n, by, err)
	}
}

// finishOldest plays the simulated nodes finishing the task that has held
// its slot longest, freeing one of the 10 slots. The nodes are heard from as
// they report it: a test that runs past a minute on a loaded machine would
// otherwise see its nodes fall silent (Candidates leaves them out) and
// nothing placed, which is not what it measures.
func finishOldest(t *testing.T, sql *pgxpool.Pool) {
	t.Helper()
	tag, err := sql.Exec(context.Background(), `update podium.tasks set state = 'succeeded', finished_at = now()
		where id = (select id from podium.tasks where state = 'scheduled' order by scheduled_at, id limit 1)`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("finish the oldest running task: %v (%d rows)", err, tag.RowsAffected())
	}
	if _, err := sql.Exec(context.Background(), `update podium.nodes set last_heartbeat_at = now()`); err != nil {
		t.Fatalf("the nodes' heartbeat: %v", err)
	}
}

// submitter reads who submitted a placed task from its id (task_WHO_NNNN).
func submitter(id string) string { return id[len("task_") : len(id)-len("_0000")] }

// Alice's sweep of 1,000 fills the 10 slots; Bob then submits 10. Among
// tasks of equal priority the pass shares free slots by fair share, so as
// slots free one at a time, Bob's tasks all start within the next 20
// placements rather than after Alice's 990, and Alice's waiting tasks say
// why they wait in words she can act on.
func TestFairShareStartsALaterSubmitterWithinTwentyPlacements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sql := fairFleet(t)
	submit(t, st, "alice", 1000)
	if placed, _ := runPass(t, st, 256); len(placed) != 10 {
		t.Fatalf("the first pass placed %d of Alice's tasks on 10 free slots, want 10", len(placed))
	}
	submit(t, st, "bob", 10)

	finishOldest(t, sql)
	placed, _ := runPass(t, st, 256)
	if len(placed) != 1 || submitter(placed[0].TaskID) != "bob" {
		t.Fatalf("the first slot freed after Bob submitted went to %v, want one of Bob's tasks", placed)
	}
	// Alice had 9 running and 990 queued when the pass claimed; Bob 10
	// queued: her next task waits for her fair share, and says so.
	got, err := st.GetTask(ctx, "task_alice_0010")
	if err != nil {
		t.Fatal(err)
	}
	if want := "waiting for its fair share: alice has 9 running, 990 queued"; got.Reason != want {
		t.Errorf("Alice's next task waits with the reason %q, want %q", got.Reason, want)
	}

	order := []string{placed[0].TaskID}
	bobs := 1
	for len(order) < 20 && bobs < 10 {
		finishOldest(t, sql)
		placed, _ := runPass(t, st, 256)
		for _, p := range placed {
			order = append(order, p.TaskID)
			if submitter(p.TaskID) == "bob" {
				bobs++
			}
		}
	}
	if bobs != 10 {
		t.Fatalf("within %d placements after Bob submitted, %d of his 10 tasks started; order: %v", len(order), bobs, order)
	}
	if len(order) > 20 {
		t.Fatalf("Bob's 10 tasks took %d placements to start, want at most 20; order: %v", len(order), order)
	}
}

// With both submitters' queues long, each holds about half the 10 slots at
// every moment once the sweep's head start is spent; a submitter an admin
// gave weight 2 holds about twice as many as one of weight 1.
func TestFairShareSharesSlotsByWeight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		bobWeight int32
		// bob's slots out of 10 at every step once settled
		bobMin, bobMax int
	}{
		{"equal weights share half each", 1, 4, 6},
		{"weight 2 gets about twice", 2, 6, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, sql := fairFleet(t)
			if tc.bobWeight != 1 {
				h := sha256.Sum256([]byte("bob's token"))
				if _, err := st.AddUser(ctx, "bob", "member", h[:], "token"); err != nil {
					t.Fatal(err)
				}
				if u, err := st.SetUserWeight(ctx, "bob", tc.bobWeight); err != nil || u.Weight != tc.bobWeight {
					t.Fatalf("set bob's weight to %d: %+v, %v", tc.bobWeight, u, err)
				}
			}
			submit(t, st, "alice", 1000)
			runPass(t, st, 256)
			submit(t, st, "bob", 1000)
			placements := map[string]int{}
			for step := range 300 {
				finishOldest(t, sql)
				placed, _ := runPass(t, st, 256)
				for _, p := range placed {
					placements[submitter(p.TaskID)]++
				}
				if step < 30 {
					continue // Alice's head start of 10 slots is still being given back
				}
				var bob int
				if err := sql.QueryRow(ctx, "select count(*) from podium.tasks where state = 'scheduled' and requested_by = 'bob'").Scan(&bob); err != nil {
					t.Fatal(err)
				}
				if bob < tc.bobMin || bob > tc.bobMax {
					t.Fatalf("after %d slots freed, bob (weight %d) holds %d of the 10 slots, want %d to %d", step+1, tc.bobWeight, bob, tc.bobMin, tc.bobMax)
				}
			}
			t.Logf("placements over 300 freed slots: %v", placements)
		})
	}
}

// A spec's group shares as one, in place of its submitters: Carol and Dave
// submitting in group ml hold about half the slots between them, as Bob
// alone does, not two thirds; their waiting tasks name the group.
func TestFairShareBetweenGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sql := fairFleet(t)
	submitIn(t, st, "carol", "ml", 500)
	submitIn(t, st, "dave", "ml", 500)
	runPass(t, st, 256)
	submit(t, st, "bob", 1000)
	for step := range 200 {
		finishOldest(t, sql)
		runPass(t, st, 256)
		if step < 30 {
			continue // the group's head start of 10 slots is still being given back
		}
		var bob int
		if err := sql.QueryRow(ctx, "select count(*) from podium.tasks where state = 'scheduled' and requested_by = 'bob'").Scan(&bob); err != nil {
			t.Fatal(err)
		}
		if bob < 4 || bob > 6 {
			t.Fatalf("after %d slots freed, bob holds %d of the 10 slots against group ml (two submitters), want 4 to 6", step+1, bob)
		}
	}
	var reason string
	if err := sql.QueryRow(ctx, `select reason from podium.tasks where state = 'queued' and share_group = 'ml'
		order by created_at, id limit 1`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	// The counts are as the last pass claimed: one slot had just been freed.
	if !regexp.MustCompile(`^waiting for its fair share: group ml has [45] running, [0-9]{3} queued$`).MatchString(reason) {
		t.Errorf("the group's next task waits with the reason %q, want it to name group ml, its 4 or 5 running and its queue", reason)
	}
}

// dispatchWith is runPass with the pass chosen: DispatchPass (fair share on) or
// DispatchPassFIFO (off), on the fleet as read now.
func dispatchWith(t *testing.T, st *store.Store, fair bool, batch int) []store.Placement {
	t.Helper()
	if fair {
		placed, _ := runPass(t, st, batch)
		return placed
	}
	ctx := context.Background()
	nodes, err := st.Candidates(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	placed, _, err := st.DispatchPassFIFO(ctx, batch, dispatch.PlaceOn(dispatch.Fleet(nodes), time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return placed
}

// A group an admin gave weight 2 holds about twice the slots of a group of
// weight 1, as a user of weight 2 does against one of weight 1; the weight
// is listed with the group's counts, and setting it back to 1 removes the
// group's row without changing how it weighs.
func TestFairShareSharesSlotsByGroupWeight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sql := fairFleet(t)
	if g, err := st.SetGroupWeight(ctx, "ml", 2, "root"); err != nil || g.Weight != 2 || g.SetBy != "root" {
		t.Fatalf("set group ml's weight to 2: %+v, %v", g, err)
	}
	submitIn(t, st, "alice", "ops", 1000)
	runPass(t, st, 256)
	submitIn(t, st, "bob", "ml", 1000)
	for step := range 300 {
		finishOldest(t, sql)
		runPass(t, st, 256)
		if step < 30 {
			continue // group ops's head start of 10 slots is still being given back
		}
		var ml int
		if err := sql.QueryRow(ctx, "select count(*) from podium.tasks where state = 'scheduled' and share_group = 'ml'").Scan(&ml); err != nil {
			t.Fatal(err)
		}
		if ml < 6 || ml > 7 {
			t.Fatalf("after %d slots freed, group ml (weight 2) holds %d of the 10 slots against group ops (weight 1), want 6 to 7", step+1, ml)
		}
	}

	gs, err := st.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].Name != "ml" || gs[0].Weight != 2 || gs[1].Name != "ops" || gs[1].Weight != 1 ||
		gs[0].Running+gs[1].Running != 10 || gs[0].Queued+gs[1].Queued != 2000-10-300 {
		t.Fatalf("podium group ls: %+v, want ml (weight 2) and ops (weight 1, no row) holding the 10 slots, %d queued between them", gs, 2000-10-300)
	}
	if _, err := st.SetGroupWeight(ctx, "ml", 1, "root"); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := sql.QueryRow(ctx, "select count(*) from podium.group_weights").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("after setting ml back to 1, podium.group_weights has %d rows (%v), want none: 1 is the default", rows, err)
	}
}

// With fair share off (--fair-share=false) the pass claims by priority then
// age only: after Alice's sweep of 1,000, Bob's 10 wait behind all of her
// queued tasks, and none of hers is told it waits for its fair share. Turned
// on again, the very next passes start Bob's 10 within 20 placements.
func TestFairShareOffIsFirstComeFirstServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, sql := fairFleet(t)
	submit(t, st, "alice", 1000)
	if placed := dispatchWith(t, st, false, 256); len(placed) != 10 {
		t.Fatalf("the first pass placed %d of Alice's tasks on 10 free slots, want 10", len(placed))
	}
	submit(t, st, "bob", 10)
	next := 10 // Alice's next task, oldest first
	for range 50 {
		finishOldest(t, sql)
		for _, p := range dispatchWith(t, st, false, 256) {
			if want := fmt.Sprintf("task_alice_%04d", next); p.TaskID != want {
				t.Fatalf("with fair share off, a freed slot went to %s, want %s: first come, first served", p.TaskID, want)
			}
			next++
		}
	}
	if next != 60 {
		t.Fatalf("50 freed slots placed %d tasks with fair share off, want 50", next-10)
	}
	var fair int
	if err := sql.QueryRow(ctx, "select count(*) from podium.tasks where reason like 'waiting for its fair share%'").Scan(&fair); err != nil || fair != 0 {
		t.Fatalf("%d tasks say they wait for their fair share with fair share off (%v), want none", fair, err)
	}

	var order []string
	bobs := 0
	for len(order) < 20 && bobs < 10 {
		finishOldest(t, sql)
		for _, p := range dispatchWith(t, st, true, 256) {
			order = append(order, p.TaskID)
			if submitter(p.TaskID) == "bob" {
				bobs++
			}
		}
	}
	if bobs != 10 || len(order) > 20 {
		t.Fatalf("with fair share on again, %d of Bob's 10 tasks started in %d placements, want all 10 within 20; order: %v", bobs, len(order), order)
	}
}
