package executor

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// usage walks directories a task writes to, as root: it follows no link a
// task made, does not block on a FIFO, counts a file with several names once,
// and bounds how deep it goes.
func TestUsageIsSafeInATaskWritableDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(p string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "huge"), 8<<20)
	write(filepath.Join(dir, "a", "b", "file"), 1<<20)
	if err := os.Link(filepath.Join(dir, "a", "b", "file"), filepath.Join(dir, "hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "huge"), filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	got, err := usage(dir, filepath.Join(dir, "does-not-exist"))
	if err != nil {
		t.Fatal(err)
	}
	// One MiB of data, plus the directories' and links' own blocks: far less
	// than two MiB (the hard link counted twice) or the 8 MiB behind a link.
	if got < 1<<20 || got >= 2<<20 {
		t.Fatalf("usage = %d bytes, want 1 MiB and a little (the file once, nothing behind the links)", got)
	}

	deep := t.TempDir()
	p := deep
	for range maxScanDepth + 1 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := usage(deep); !errors.Is(err, errTooDeep) {
		t.Fatalf("usage of directories %d deep: %v, want errTooDeep", maxScanDepth+1, err)
	}
}

func TestSizeText(t *testing.T) {
	t.Parallel()
	for b, want := range map[int64]string{10 << 30: "10 GiB", 3 << 29: "1.5 GiB", 300 << 20: "300 MiB", 2048: "2 KiB", 12: "12 bytes"} {
		if got := sizeText(b); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", b, got, want)
		}
	}
}
