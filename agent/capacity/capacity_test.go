package capacity_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/podiumhq/podium/agent/capacity"
)

func TestMeasure(t *testing.T) {
	c := capacity.Measure(context.Background(), t.TempDir(), nil)
	if c.GetCpuCores() < 1 || c.GetMemoryMb() < 1 || c.GetDiskFreeMb() < 1 {
		t.Fatalf("capacity %v: every figure should be measurable on a Linux test machine", c)
	}
	if c.GetMaxTasks() != 0 {
		t.Fatalf("max_tasks %d, want it left to the caller", c.GetMaxTasks())
	}
}

func TestMeasureMissingDirIsUnmeasured(t *testing.T) {
	c := capacity.Measure(context.Background(), filepath.Join(t.TempDir(), "missing"), nil)
	if c.GetDiskFreeMb() != 0 {
		t.Fatalf("disk of a missing directory measured as %d MB, want 0 (unmeasured)", c.GetDiskFreeMb())
	}
	if c.GetCpuCores() < 1 {
		t.Fatal("one failed measurement spoiled the others")
	}
}
