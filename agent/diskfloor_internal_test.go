package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A data disk below the floor refuses assignments, saying so, and reports
// since when; freed, it takes them again and reports nothing. Measured on a
// real 8 MiB tmpfs with a 4 MiB floor.
func TestDiskFloorOnARealDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
		t.Fatalf("mount an 8 MiB tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	d := &diskFloor{dir: dir, floorMB: 4, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	if why := d.refusal(); why != "" {
		t.Fatalf("an empty 8 MiB disk with a 4 MiB floor refuses a task: %q", why)
	}
	fill := filepath.Join(dir, "fill")
	if err := os.WriteFile(fill, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	why := d.refusal()
	if !strings.Contains(why, "below its free-space floor since ") || !strings.Contains(why, "floor 4 MiB") {
		t.Fatalf("a disk with about 2 MiB free under a 4 MiB floor: refusal %q, want one naming the floor and since when", why)
	}
	c := &podiumv1.Capacity{}
	d.report(c)
	if c.GetMinFreeDiskMb() != 4 || c.GetDiskLowSince() == nil {
		t.Fatalf("reported floor %d MiB, low since %v; want 4 and a time", c.GetMinFreeDiskMb(), c.GetDiskLowSince())
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if why := d.refusal(); why != "" {
		t.Fatalf("the freed disk still refuses: %q", why)
	}
	c = &podiumv1.Capacity{}
	d.report(c)
	if c.GetDiskLowSince() != nil {
		t.Fatalf("the freed disk is reported low since %v", c.GetDiskLowSince())
	}
}
