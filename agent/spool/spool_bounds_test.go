package spool_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/spool"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// dirSize is what the spool's files take on disk.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// Size says what the files hold, through appends, acks, compaction and
// removal; over its bound the spool compacts files it would otherwise leave
// alone (they are under the size compaction waits for), so acks bring it back
// under the bound.
func TestSizeAndCompactionOverTheBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := open(t, dir)
	defer s.Close()
	chunk := strings.Repeat("x", 16<<10)
	const tasks, events = 4, 40 // ~2.5 MB: every file under the 4 MB compaction waits for
	for i := range tasks {
		task := string(rune('a' + i))
		_ = s.Begin(&podiumv1.Assign{TaskId: task, Attempt: 1}, 0)
		for seq := uint64(1); seq <= events; seq++ {
			if err := s.Append(logEv(task, seq, chunk), []byte(`{"task":{"file":1}}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := s.Size(), dirSize(t, dir); got != want {
		t.Fatalf("Size %d, the files hold %d", got, want)
	}
	full := s.Size()
	_ = s.Ack(attempt.Key{TaskID: "a", Attempt: 1}, events-1)
	if got, want := s.Size(), dirSize(t, dir); got != want || got < full {
		t.Fatalf("without a bound an acked small file is kept: Size %d, files %d, before %d", got, want, full)
	}
	// The bound is given at Open: reopen the same files with one.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _, err := spool.Open(dir, spool.Options{MaxBytes: full / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.Size(), dirSize(t, dir); got != want {
		t.Fatalf("reopened: Size %d, the files hold %d", got, want)
	}
	for i := range tasks {
		_ = s.Ack(attempt.Key{TaskID: string(rune('a' + i)), Attempt: 1}, events)
	}
	if got, want := s.Size(), dirSize(t, dir); got != want || got > full/2 {
		t.Fatalf("over its bound of %d, everything acknowledged: Size %d, files %d; want them compacted under the bound", full/2, got, want)
	}
	_ = s.Remove(attempt.Key{TaskID: "a", Attempt: 1})
	if got, want := s.Size(), dirSize(t, dir); got != want {
		t.Fatalf("after Remove: Size %d, the files hold %d", got, want)
	}
}
