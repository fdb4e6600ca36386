package ingest

import (
	"testing"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Messages with little output share lane 0, where they share commits; the
// messages with a lot of output take the bulk lanes in turn, so a flood is
// written by every bulk lane side by side however few nodes send it.
func TestLaneOf(t *testing.T) {
	msg := func(chunks, size int) []store.IngestItem {
		var evs []*podiumv1.TaskEvent
		for range chunks {
			evs = append(evs, &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: make([]byte, size)}}})
		}
		return []store.IngestItem{{NodeID: "node_a", TaskID: "t", Events: evs},
			{NodeID: "node_a", TaskID: "u", Events: []*podiumv1.TaskEvent{{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{}}}}}}
	}
	in := newIngester(Deps{}, bulkLanes)
	if len(in.lanes) != 1+bulkLanes {
		t.Fatalf("%d lanes, want %d", len(in.lanes), 1+bulkLanes)
	}
	if l := in.laneOf(msg(3, 1024)); l != 0 {
		t.Errorf("a small message went to lane %d, want 0", l)
	}
	count := map[int]int{}
	for range 4 * bulkLanes {
		count[in.laneOf(msg(16, 64<<10))]++
	}
	for l := 1; l <= bulkLanes; l++ {
		if count[l] != 4 {
			t.Errorf("bulk lane %d took %d of %d big messages, want 4 (counts %v)", l, count[l], 4*bulkLanes, count)
		}
	}
	one := &Ingester{lanes: in.lanes[:1]}
	if l := one.laneOf(msg(16, 64<<10)); l != 0 {
		t.Errorf("with no bulk lanes a big message went to lane %d, want 0", l)
	}
}

// The bulk lanes take at most half the replica's pool, so a flood on all of
// them leaves connections for everything else, and there is always one.
func TestBulkLanesForThePool(t *testing.T) {
	for _, c := range []struct {
		pool int32
		want int
	}{{1, 1}, {2, 1}, {4, 2}, {6, 3}, {16, bulkLanes}, {64, bulkLanes}} {
		if got := BulkLanesFor(c.pool); got != c.want {
			t.Errorf("a pool of %d gets %d bulk lanes, want %d", c.pool, got, c.want)
		}
	}
}
