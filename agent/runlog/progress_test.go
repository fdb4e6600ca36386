package runlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/podiumhq/podium/agent/runlog"
)

// The agent's progress file reads back what was last set; a rewrite caught
// half done reads as torn, to be read again; the agent opens nothing but a
// regular file, without following a link.
func TestProgressFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "progress")
	if err := runlog.CreateProgress(path); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644: the runner runs as any user", st.Mode().Perm())
	}
	read := func() (int64, error) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return runlog.ReadProgress(f)
	}
	if pos, err := read(); pos != 0 || err != nil {
		t.Fatalf("a new progress file reads %d, %v; want 0", pos, err)
	}
	w, err := runlog.OpenProgress(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, pos := range []int64{16, 1 << 20, 1 << 40} {
		if err := w.Set(pos); err != nil {
			t.Fatal(err)
		}
		if got, err := read(); got != pos || err != nil {
			t.Fatalf("after Set(%d) the file reads %d, %v", pos, got, err)
		}
	}
	_ = w.Close()
	b, _ := os.ReadFile(path)
	b[3] ^= 1 // a rewrite half done
	_ = os.WriteFile(path, b, 0o644)
	if _, err := read(); !errors.Is(err, runlog.ErrTornProgress) {
		t.Fatalf("a torn progress file reads %v, want ErrTornProgress", err)
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := runlog.OpenProgress(link); err == nil {
		t.Fatal("OpenProgress followed a symbolic link")
	}
	if _, err := runlog.OpenProgress(dir); err == nil {
		t.Fatal("OpenProgress opened a directory")
	}
}
