package runlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/runlog"
)

// A new lease file never fences; it reads back what the agent last wrote;
// a lease's deadline is on the boot clock, so it runs out when that clock
// passes it, and LeaseUntil converts a time on the agent's clock to it; a
// rewrite caught half done reads as torn; and the agent writes nothing but a
// regular file, without following a link.
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
	if l, err := read(); l.Deadline != 0 || l.Grace != 0 || err != nil {
		t.Fatalf("a new lease file reads %+v, %v; want one that never fences", l, err)
	}
	if out, _ := (runlog.Lease{}).RunOut(); out {
		t.Fatal("a lease that never fences has run out")
	}
	for _, want := range []runlog.Lease{{Deadline: 123456789, Grace: 2 * time.Second}, {Deadline: 1 << 60, Grace: time.Millisecond}, {}} {
		if err := runlog.WriteLease(path, want); err != nil {
			t.Fatal(err)
		}
		if got, err := read(); err != nil || got != want {
			t.Fatalf("after writing %+v the file reads %+v, %v", want, got, err)
		}
	}

	before := runlog.BootTime()
	l := runlog.LeaseUntil(time.Now().Add(time.Hour), time.Second)
	if d := l.Deadline - before; d < time.Hour-time.Minute || d > time.Hour+time.Minute || l.Grace != time.Second {
		t.Fatalf("a lease for an hour from now is %v ahead of the boot clock (grace %v)", d, l.Grace)
	}
	if out, _ := l.RunOut(); out {
		t.Fatal("a lease an hour ahead has run out")
	}
	if out, ago := runlog.LeaseUntil(time.Now().Add(-time.Second), 0).RunOut(); !out || ago < time.Second {
		t.Fatalf("a lease that ran out a second ago: run out %v, %v ago", out, ago)
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
	l = runlog.Lease{Deadline: time.Hour}
	if err := runlog.WriteLease(link, l); err == nil {
		t.Fatal("WriteLease followed a symbolic link")
	}
	if err := runlog.WriteLease(dir, l); err == nil {
		t.Fatal("WriteLease wrote a directory")
	}
	if err := runlog.WriteLease(filepath.Join(dir, "gone"), l); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteLease of a missing file: %v, want os.ErrNotExist (the attempt's files are gone)", err)
	}
}
