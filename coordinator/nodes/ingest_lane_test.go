package nodes

import (
	"testing"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Messages with little output share lane 0, where they share commits; a
// message with a lot of output goes to a bulk lane, always its node's, so
// floods from different nodes are written side by side.
func TestLaneOf(t *testing.T) {
	msg := func(node string, chunks, size int) []store.IngestItem {
		var evs []*podiumv1.TaskEvent
		for range chunks {
			evs = append(evs, &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: make([]byte, size)}}})
		}
		return []store.IngestItem{{NodeID: node, TaskID: "t", Events: evs},
			{NodeID: node, TaskID: "u", Events: []*podiumv1.TaskEvent{{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{}}}}}}
	}
	if l := laneOf(msg("node_a", 3, 1024), bulkLanes); l != 0 {
		t.Errorf("a small message went to lane %d, want 0", l)
	}
	if l := laneOf(msg("node_a", 16, 64<<10), 0); l != 0 {
		t.Errorf("with no bulk lanes a big message went to lane %d, want 0", l)
	}
	lanes := map[int]bool{}
	for i := range 64 {
		node := "node_" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		l := laneOf(msg(node, 16, 64<<10), bulkLanes)
		if l < 1 || l > bulkLanes {
			t.Fatalf("a big message of %s went to lane %d, want 1..%d", node, l, bulkLanes)
		}
		if again := laneOf(msg(node, 8, 64<<10), bulkLanes); again != l {
			t.Errorf("%s's big messages went to lanes %d and %d, want one", node, l, again)
		}
		lanes[l] = true
	}
	if len(lanes) < 2 {
		t.Errorf("64 nodes' big messages all went to lanes %v, want them spread", lanes)
	}
}
