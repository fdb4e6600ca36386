package ids

import (
	"sort"
	"testing"
	"time"
)

func TestIDsSortByTimeAndAreUnique(t *testing.T) {
	var got []string
	seen := map[string]bool{}
	for i := range 50 {
		id := encode(time.UnixMilli(int64(1_700_000_000_000 + i)))
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		got = append(got, "task_"+id)
	}
	if !sort.StringsAreSorted(got) {
		t.Fatalf("ids made in time order do not sort in time order: %v", got)
	}
	id := New("task")
	if !Valid("task", id) {
		t.Fatalf("Valid(%q) = false", id)
	}
	for _, bad := range []string{"", "task_", "node_" + id[5:], "task_" + id[5:30] + "I", id + "X"} {
		if Valid("task", bad) {
			t.Errorf("Valid(%q) = true, want false", bad)
		}
	}
}
