package runlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/runlog"
)

// A new lease file never fences; it reads back what the agent last wrote,
// to the nanosecond; a rewrite caught half done reads as torn; and the agent
// writes nothing but a regular file, without following a link.
func TestLeaseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lease")
	if err := runlog.CreateLease(path); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644: the runner runs as any user", st.Mode().Perm())
	}
	read := func() (runlog.Lease, error) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return runlog.ReadLease(f)
	}
	if l, err := read(); !l.FenceAt.IsZero() || l.Grace != 0 || err != nil {
		t.Fatalf("a new lease file reads %+v, %v; want one that never fences", l, err)
	}
	at := time.Date(2026, 12, 7, 22, 15, 3, 123456789, time.UTC)
	for _, want := range []runlog.Lease{{FenceAt: at, Grace: 2 * time.Second}, {FenceAt: at.Add(time.Hour), Grace: time.Millisecond}, {}} {
		if err := runlog.WriteLease(path, want); err != nil {
			t.Fatal(err)
		}
		got, err := read()
		if err != nil || !got.FenceAt.Equal(want.FenceAt) || got.Grace != want.Grace {
			t.Fatalf("after writing %+v the file reads %+v, %v", want, got, err)
		}
	}
	b, _ := os.ReadFile(path)
	b[5] ^= 1 // a rewrite half done
	_ = os.WriteFile(path, b, 0o644)
	if _, err := read(); !errors.Is(err, runlog.ErrTornProgress) {
		t.Fatalf("a torn lease file reads %v, want ErrTornProgress", err)
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := runlog.WriteLease(link, runlog.Lease{FenceAt: at}); err == nil {
		t.Fatal("WriteLease followed a symbolic link")
	}
	if err := runlog.WriteLease(dir, runlog.Lease{FenceAt: at}); err == nil {
		t.Fatal("WriteLease wrote a directory")
	}
	if err := runlog.WriteLease(filepath.Join(dir, "gone"), runlog.Lease{FenceAt: at}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteLease of a missing file: %v, want os.ErrNotExist (the attempt's files are gone)", err)
	}
}
