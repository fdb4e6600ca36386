package dispatch_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/dispatch"
)

// t0 is when the tests' queues start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sweep is n tasks of one sharer at one priority, submitted a second apart
// from start, with ids <sharer>_01, <sharer>_02, ...
func sweep(sharer string, priority int32, start time.Time, n int) []dispatch.Queued {
	qs := make([]dispatch.Queued, n)
	for i := range qs {
		qs[i] = dispatch.Queued{ID: fmt.Sprintf("%s_%02d", sharer, i+1), Sharer: sharer, Priority: priority,
			CreatedAt: start.Add(time.Duration(i) * time.Second)}
	}
	return qs
}

func ids(qs []dispatch.Queued) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.ID
	}
	return out
}

// Two busy sharers of equal weight alternate, whoever queued first: the
// older one's task goes first at each tie.
func TestOrderAlternatesTwoBusySharers(t *testing.T) {
	queue := append(sweep("alice", 0, t0, 4), sweep("bob", 0, t0.Add(time.Hour), 4)...)
	got := ids(dispatch.Order(queue, nil))
	want := []string{"alice_01", "bob_01", "alice_02", "bob_02", "alice_03", "bob_03", "alice_04", "bob_04"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Each already holding two slots changes nothing between equals.
	busy := map[string]dispatch.Sharer{"alice": {Running: 2}, "bob": {Running: 2}}
	if got := ids(dispatch.Order(queue, busy)); !slices.Equal(got, want) {
		t.Fatalf("with two slots each, order %v, want %v", got, want)
	}
}

// A sharer of weight 2 is offered twice the slots of one of weight 1: at
// every point of the order it has had about twice as many tasks offered.
func TestOrderGivesWeightTwoTwiceTheSlots(t *testing.T) {
	queue := append(sweep("alice", 0, t0, 30), sweep("bob", 0, t0, 30)...)
	order := dispatch.Order(queue, map[string]dispatch.Sharer{"bob": {Weight: 2}})
	bob := 0
	for i, q := range order[:45] {
		if q.Sharer == "bob" {
			bob++
		}
		if n := i + 1; n%3 == 0 && bob != 2*n/3 {
			t.Fatalf("after %d tasks bob (weight 2) was offered %d, want %d: %v", n, bob, 2*n/3, ids(order[:n]))
		}
	}
}

// Priority beats fairness: a sharer holding every slot still goes first
// with a task of higher priority, and the order within each priority is
// fair share's.
func TestOrderPutsPriorityBeforeFairness(t *testing.T) {
	queue := append(sweep("alice", 0, t0, 2), sweep("bob", 0, t0.Add(time.Hour), 2)...)
	queue = append(queue, sweep("hog", 5, t0.Add(2*time.Hour), 2)...)
	got := ids(dispatch.Order(queue, map[string]dispatch.Sharer{"hog": {Running: 1000}}))
	want := []string{"hog_01", "hog_02", "alice_01", "bob_01", "alice_02", "bob_02"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// A newcomer's first task comes before a hog's next one: the hog holds
// slots, the newcomer none, however much older the hog's queue is.
func TestOrderPutsANewcomersFirstTaskBeforeAHogsNext(t *testing.T) {
	queue := append(sweep("hog", 0, t0, 1000), sweep("newcomer", 0, t0.Add(24*time.Hour), 2)...)
	got := ids(dispatch.Order(queue, map[string]dispatch.Sharer{"hog": {Running: 10}})[:3])
	want := []string{"newcomer_01", "newcomer_02", "hog_01"}
	if !slices.Equal(got, want) {
		t.Fatalf("order starts %v, want %v: the newcomer holds no slot, the hog 10", got, want)
	}
	// Holding one slot, the hog's next task still comes after the
	// newcomer's first, and ties with its second (virtual time 2 each),
	// which it wins as the older.
	got = ids(dispatch.Order(queue, map[string]dispatch.Sharer{"hog": {Running: 1}})[:3])
	if want := []string{"newcomer_01", "hog_01", "newcomer_02"}; !slices.Equal(got, want) {
		t.Fatalf("with the hog holding one slot the order starts %v, want %v", got, want)
	}
}

// Ties of virtual time go to the oldest task, then the lowest id.
func TestOrderBreaksTiesByAgeThenID(t *testing.T) {
	queue := []dispatch.Queued{
		{ID: "task_c", Sharer: "carol", CreatedAt: t0},
		{ID: "task_b", Sharer: "bob", CreatedAt: t0},
		{ID: "task_a", Sharer: "alice", CreatedAt: t0.Add(time.Microsecond)},
		{ID: "task_d", Sharer: "dave", CreatedAt: t0.Add(-time.Second)},
	}
	got := ids(dispatch.Order(queue, nil))
	if want := []string{"task_d", "task_b", "task_c", "task_a"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if got := ids(queue); !slices.Equal(got, []string{"task_c", "task_b", "task_a", "task_d"}) {
		t.Fatalf("Order changed its input to %v", got)
	}
}

// With fair share off the order is priority, then age, then id, whoever
// submitted and however many slots they hold.
func TestOrderFIFOIsPriorityThenAgeThenID(t *testing.T) {
	queue := append(sweep("alice", 0, t0, 3), sweep("bob", 0, t0.Add(time.Hour), 2)...)
	queue = append(queue, dispatch.Queued{ID: "bob_urgent", Sharer: "bob", Priority: 5, CreatedAt: t0.Add(2 * time.Hour)},
		dispatch.Queued{ID: "alice_00", Sharer: "alice", CreatedAt: t0})
	got := ids(dispatch.OrderFIFO(queue))
	want := []string{"bob_urgent", "alice_00", "alice_01", "alice_02", "alice_03", "bob_01", "bob_02"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
