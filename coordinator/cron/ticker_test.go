package cron_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two replicas that both believe they lead (a lock has no fencing token, so
// for a moment after a failover they may) fire the same due ticks at once,
// each through its own store: every tick still creates exactly one task.
func TestTwoLeadersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	open := func() *store.Store {
		st, err := store.Open(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	a, b := open(), open()
	addOwner(t, a)
	start := time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)
	const n = 20
	for i := range n {
		next := start.Add(30 * time.Second)
		_, err := a.CreateSchedule(ctx, store.Schedule{ID: "sched_" + string(rune('a'+i)), Name: "s" + string(rune('a'+i)),
			Cron: "* * * * *", Timezone: "UTC", Spec: &podiumv1.TaskSpec{Image: "busybox"}, Overlap: cron.OverlapAllow,
			CreatedBy: "alice", NextRunAt: &next})
		if err != nil {
			t.Fatal(err)
		}
	}
	var created [2]int
	for minute := 1; minute <= 3; minute++ {
		now := func() time.Time { return start.Add(time.Duration(minute)*time.Minute + 5*time.Second) }
		tickers := []*cron.Ticker{
			cron.NewTicker(cron.Config{Now: now, Batch: 3}, cron.Deps{Store: a}),
			cron.NewTicker(cron.Config{Now: now, Batch: 3}, cron.Deps{Store: b}),
		}
		var wg sync.WaitGroup
		for i, tk := range tickers {
			wg.Go(func() {
				tasks, err := tk.Tick(ctx)
				if err != nil {
					t.Errorf("ticker %d: %v", i, err)
				}
				created[i] += len(tasks)
			})
		}
		wg.Wait()
		if got := created[0] + created[1]; got != n*minute {
			t.Fatalf("after minute %d the two leaders created %d tasks (%d and %d), want one per schedule per tick: %d",
				minute, got, created[0], created[1], n*minute)
		}
	}
	for i := range n {
		sc, err := a.GetSchedule(ctx, "s"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		ticks, err := a.ScheduleTicks(ctx, sc.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ticks) != 3 {
			t.Errorf("schedule %s has %d ticks, want 3", sc.Name, len(ticks))
		}
		for _, tk := range ticks {
			if tk.TaskID == nil {
				t.Errorf("schedule %s tick %v has no task", sc.Name, tk.Tick)
			}
		}
	}
}

// A bad expression or zone is refused naming the field and what is wrong.
func TestParseRefusesWithTheFieldNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cron, tz, says string }{
		{"", "", "cron: required"},
		{"* * * * * *", "", "cron: \"* * * * * *\" is not a 5-field cron expression"},
		{"*/0 * * * *", "", "cron:"},
		{"* * * * *", "Local", "timezone: \"Local\" is not an IANA time zone name"},
		{"* * * * *", "Nowhere/Town", "timezone:"},
		{"CRON_TZ=UTC * * * * *", "", "--timezone"},
	} {
		if _, _, err := cron.Parse(c.cron, c.tz); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Parse(%q, %q): %v, want an error saying %q", c.cron, c.tz, err, c.says)
		}
	}
	s, loc, err := cron.Parse("@hourly", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if got := cron.Next(s, loc, time.Date(2026, 1, 5, 10, 20, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 1, 5, 11, 0, 0, 0, time.UTC)) {
		t.Errorf("@hourly next %v", got)
	}
}

// A schedule keeps only its latest store.KeptTicks ticks: the table does
// not grow with a schedule's age.
func TestTicksAreTrimmed(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	addOwner(t, st)
	start := time.Date(2026, 1, 5, 10, 0, 30, 0, time.UTC)
	next := start.Add(30 * time.Second)
	sc, err := st.CreateSchedule(ctx, store.Schedule{ID: "sched_trim", Name: "trim", Cron: "* * * * *", Timezone: "UTC",
		Spec: &podiumv1.TaskSpec{Image: "busybox"}, Overlap: cron.OverlapAllow, CreatedBy: "alice", NextRunAt: &next})
	if err != nil {
		t.Fatal(err)
	}
	const fired = store.KeptTicks + 5
	for minute := 1; minute <= fired; minute++ {
		now := start.Add(time.Duration(minute) * time.Minute)
		tasks, err := cron.NewTicker(cron.Config{Now: func() time.Time { return now }}, cron.Deps{Store: st}).Tick(ctx)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("minute %d: %d tasks, %v", minute, len(tasks), err)
		}
	}
	ticks, err := st.ScheduleTicks(ctx, sc.ID, 2*store.KeptTicks)
	if err != nil {
		t.Fatal(err)
	}
	if len(ticks) != store.KeptTicks || !ticks[0].Tick.Equal(start.Add(fired*time.Minute-30*time.Second)) {
		t.Errorf("%d ticks kept, newest %v; want the latest %d", len(ticks), ticks[0].Tick, store.KeptTicks)
	}
}

// addOwner adds alice, the member the tests' schedules belong to: a tick
// runs as its owner, and a local name with no user row is a removed user,
// whose schedules pause instead of firing.
func addOwner(t *testing.T, st *store.Store) {
	t.Helper()
	h := sha256.Sum256([]byte("alice's token"))
	if _, err := st.AddUser(context.Background(), "alice", "member", h[:], "token"); err != nil {
		t.Fatal(err)
	}
}
