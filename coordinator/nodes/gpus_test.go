package nodes

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A heartbeat counts as a GPU change only when its list differs from the
// last one the session saw, so the flush writes the GPUs only then.
func TestHeartbeatGPUsChangeOnlyWhenTheListDoes(t *testing.T) {
	t4 := &podiumv1.Gpu{Index: 0, Uuid: "GPU-t4", Model: "Tesla T4", MemoryMb: 15360}
	h100 := &podiumv1.Gpu{Index: 1, Uuid: "GPU-h100", Model: "NVIDIA H100 80GB HBM3", MemoryMb: 81559}
	s := newSession("node_a", 1)
	s.seen(&podiumv1.Capacity{MaxTasks: 2, Gpus: []*podiumv1.Gpu{t4}}) // the Hello's

	for _, tc := range []struct {
		name string
		c    *podiumv1.Capacity
		want bool
	}{
		{"a heartbeat without a capacity", nil, false},
		{"the same GPUs, other figures", &podiumv1.Capacity{MaxTasks: 3, DiskFreeMb: 99,
			Gpus: []*podiumv1.Gpu{{Index: 0, Uuid: "GPU-t4", Model: "Tesla T4", MemoryMb: 15360}}}, false},
		{"a GPU added", &podiumv1.Capacity{MaxTasks: 2, Gpus: []*podiumv1.Gpu{t4, h100}}, true},
		{"the same two again", &podiumv1.Capacity{MaxTasks: 2, Gpus: []*podiumv1.Gpu{t4, h100}}, false},
		{"every GPU gone", &podiumv1.Capacity{MaxTasks: 2}, true},
	} {
		if got := s.gpusChanged(tc.c); got != tc.want {
			t.Errorf("%s: gpusChanged = %v, want %v", tc.name, got, tc.want)
		}
		s.seen(tc.c)
	}
}

// A change buffered for the flush survives a later heartbeat that reports
// the same new list (and so is no change of its own).
func TestMergeBeatKeepsAGPUChange(t *testing.T) {
	changed := store.Heartbeat{NodeID: "node_a", GPUsChanged: true, GPUs: []store.NodeGPU{{UUID: "GPU-x"}}, RunningTasks: 1}
	later := store.Heartbeat{NodeID: "node_a", RunningTasks: 2}
	got := mergeBeat(changed, later)
	if !got.GPUsChanged || len(got.GPUs) != 1 || got.GPUs[0].UUID != "GPU-x" || got.RunningTasks != 2 {
		t.Errorf("mergeBeat = %+v, want the later heartbeat carrying the earlier GPU change", got)
	}
	newer := store.Heartbeat{NodeID: "node_a", GPUsChanged: true}
	if got := mergeBeat(changed, newer); !got.GPUsChanged || len(got.GPUs) != 0 {
		t.Errorf("mergeBeat with a newer change = %+v, want the newer list (none)", got)
	}
}

// What a node says of its GPUs is bounded before it is stored: a count, and
// names and UUIDs cut short, valid UTF-8 without control characters (jsonb
// refuses a NUL), memory never negative.
func TestNodeGPUsBounded(t *testing.T) {
	many := make([]*podiumv1.Gpu, maxNodeGPUs+10)
	for i := range many {
		many[i] = &podiumv1.Gpu{Index: int32(i), Model: "Tesla T4"}
	}
	if got := nodeGPUs(many); len(got) != maxNodeGPUs {
		t.Errorf("nodeGPUs kept %d of %d GPUs, want %d", len(got), len(many), maxNodeGPUs)
	}
	got := nodeGPUs([]*podiumv1.Gpu{{Index: -3, Uuid: "GPU-\x00a\nb", Model: strings.Repeat("é", 200) + "\xff", MemoryMb: -1}})[0]
	if got.Index != 0 || got.UUID != "GPU-ab" || len(got.Model) > maxGPUModelBytes || got.MemoryMB != 0 {
		t.Errorf("nodeGPUs = %+v, want index 0, UUID GPU-ab, a model of at most %d bytes, memory 0", got, maxGPUModelBytes)
	}
	if !utf8.ValidString(got.Model) || !strings.HasPrefix(got.Model, "éé") {
		t.Errorf("model = %q, want valid UTF-8 cut on a character boundary", got.Model)
	}
	if nodeGPUs(nil) != nil {
		t.Error("nodeGPUs(nil) is not nil")
	}
}
