package gpu_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/podiumhq/podium/agent/gpu"
)

// mixedNode is a node with two H100s and two RTX 4090s, indexes out of order
// as a discovery may list them.
func mixedNode() []gpu.GPU {
	return []gpu.GPU{
		{Index: 2, UUID: "GPU-00000000-0000-0000-0000-000000000002", Model: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
		{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{Index: 1, UUID: "GPU-00000000-0000-0000-0000-000000000001", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{Index: 3, UUID: "GPU-00000000-0000-0000-0000-000000000003", Model: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564},
	}
}

func uuids(gs []gpu.GPU) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.UUID)
	}
	return out
}

func TestAllocatorNeverGivesTheSameGPUTwice(t *testing.T) {
	t.Parallel()
	a := gpu.NewAllocator()
	a.Set(mixedNode())
	first, err := a.Take("t1/1", gpu.Request{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Lowest index first.
	if got := uuids(first); !slices.Equal(got, uuids(a.GPUs()[:3])) {
		t.Fatalf("took %v, want GPUs 0, 1, 2", got)
	}
	if _, err := a.Take("t2/1", gpu.Request{N: 2}); err == nil ||
		!strings.Contains(err.Error(), "node has 1 free of the 2 GPUs the task asks") {
		t.Fatalf("taking 2 of 1 free: %v, want a refusal saying 1 is free", err)
	}
	second, err := a.Take("t2/1", gpu.Request{N: 1})
	if err != nil || len(second) != 1 || slices.Contains(uuids(first), second[0].UUID) {
		t.Fatalf("second attempt got %v (%v), want the one GPU the first does not hold", second, err)
	}
	if err := a.Check(gpu.Request{N: 1}); err == nil {
		t.Fatal("Check with every GPU held says yes")
	}
	// A request for no GPU needs none.
	if got, err := a.Take("t3/1", gpu.Request{}); err != nil || got != nil {
		t.Fatalf("Take of 0 GPUs = %v, %v", got, err)
	}
	// An attempt takes its GPUs once.
	a.Release("t2/1")
	if _, err := a.Take("t1/1", gpu.Request{N: 1}); err == nil {
		t.Fatal("an attempt holding GPUs was given more")
	}
}

func TestAllocatorConcurrentTakesNeverOverlap(t *testing.T) {
	t.Parallel()
	a := gpu.NewAllocator()
	a.Set(mixedNode())
	var wg sync.WaitGroup
	got := make([][]gpu.GPU, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = a.Take(fmt.Sprintf("t%d/1", i), gpu.Request{N: 1})
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	n := 0
	for _, gs := range got {
		for _, g := range gs {
			if seen[g.UUID] {
				t.Fatalf("GPU %s given twice", g.UUID)
			}
			seen[g.UUID] = true
			n++
		}
	}
	if n != 4 {
		t.Fatalf("16 attempts asking 1 GPU each on a 4-GPU node got %d, want 4", n)
	}
}

func TestAllocatorReleaseFreesTheAttemptsGPUsOnly(t *testing.T) {
	t.Parallel()
	a := gpu.NewAllocator()
	a.Set(mixedNode())
	one, _ := a.Take("a/1", gpu.Request{N: 2})
	two, _ := a.Take("b/1", gpu.Request{N: 2})
	a.Release("a/1")
	if held := a.Held("a/1"); held != nil {
		t.Fatalf("released attempt still holds %v", held)
	}
	if held := a.Held("b/1"); !slices.Equal(held, uuids(two)) {
		t.Fatalf("the other attempt holds %v, want %v", held, uuids(two))
	}
	again, err := a.Take("c/1", gpu.Request{N: 2})
	if err != nil || !slices.Equal(uuids(again), uuids(one)) {
		t.Fatalf("after release, took %v (%v), want the released %v", uuids(again), err, uuids(one))
	}
}

func TestAllocatorModelAndMemoryFilters(t *testing.T) {
	t.Parallel()
	a := gpu.NewAllocator()
	a.Set(mixedNode())
	h100, err := a.Take("a/1", gpu.Request{N: 2, Model: "NVIDIA H100*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range h100 {
		if !strings.HasPrefix(g.Model, "NVIDIA H100") {
			t.Fatalf("model filter gave %+v", g)
		}
	}
	err = a.Check(gpu.Request{N: 1, Model: "NVIDIA H100*"})
	if err == nil || !strings.Contains(err.Error(), `node has 0 free of the 1 GPU matching "NVIDIA H100*" the task asks`) {
		t.Fatalf("both H100s held: %v", err)
	}
	err = a.Check(gpu.Request{N: 1, MemoryMiB: 40000})
	if err == nil || !strings.Contains(err.Error(), "with at least 40000 MiB") {
		t.Fatalf("memory filter with only 24 GiB GPUs free: %v", err)
	}
	if err := a.Check(gpu.Request{N: 2, MemoryMiB: 24564}); err != nil {
		t.Fatalf("two 24564 MiB GPUs free, asking 24564 MiB: %v", err)
	}
	for _, bad := range []string{"[", "NVIDIA H100*/**"} {
		if err := a.Check(gpu.Request{N: 1, Model: bad}); err == nil || !strings.Contains(err.Error(), "gpu_model") {
			t.Fatalf("gpu_model %q: %v, want an error naming gpu_model", bad, err)
		}
	}
	if err := a.Check(gpu.Request{N: 65}); err == nil || !strings.Contains(err.Error(), "more than any node has") {
		t.Fatalf("65 GPUs: %v", err)
	}
}

// An adopted attempt's GPUs, read back from its record, are held again, even
// when this discovery does not list them; and never given to another.
func TestAllocatorRestoreFromAdoptedAttempts(t *testing.T) {
	t.Parallel()
	a := gpu.NewAllocator()
	gs := mixedNode()
	a.Set(gs)
	if err := a.Restore("old/1", []string{gs[1].UUID, gs[2].UUID}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Take("new/1", gpu.Request{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(uuids(got), gs[1].UUID) || slices.Contains(uuids(got), gs[2].UUID) {
		t.Fatalf("took %v, which the adopted attempt holds", uuids(got))
	}
	if err := a.Restore("other/1", []string{gs[1].UUID}); err == nil || !strings.Contains(err.Error(), "held by old/1") {
		t.Fatalf("restoring a GPU another attempt holds: %v", err)
	}
	// A rediscovery that lost a held GPU keeps it held: when it comes back
	// it is still the adopted attempt's.
	a.Set(gs[2:])
	a.Set(gs)
	if held := a.Held("old/1"); len(held) != 2 {
		t.Fatalf("after rediscovery the adopted attempt holds %v", held)
	}
	if err := a.Check(gpu.Request{N: 1}); err == nil {
		t.Fatal("all four held, yet Check says one is free")
	}
}
