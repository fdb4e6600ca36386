package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/inbox"
)

func take(t *testing.T, dir string, wait time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got string
	err := inbox.Take(ctx, dir, 5*time.Millisecond, func(_ int64, text []byte) error {
		got = string(text)
		return nil
	})
	return got, err
}

func TestDeliverAndTakeInOrderOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "inbox")
	if err := inbox.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o777 {
		t.Fatalf("inbox mode %v: the task's user must be able to write it", st.Mode().Perm())
	}
	for _, m := range []struct {
		id   int64
		text string
	}{{7, "second"}, {3, "first"}} {
		if ok, err := inbox.Deliver(dir, m.id, m.text); !ok || err != nil {
			t.Fatalf("Deliver %d: %v %v", m.id, ok, err)
		}
	}
	if ok, _ := inbox.Deliver(dir, 3, "first again"); ok {
		t.Fatal("a repeated message id was delivered twice")
	}
	for _, want := range []string{"first", "second"} {
		if got, err := take(t, dir, time.Second); got != want || err != nil {
			t.Fatalf("took %q (%v), want %q", got, err, want)
		}
	}
	if ok, _ := inbox.Deliver(dir, 5, "older than what was read"); ok {
		t.Fatal("a message id below the cursor was delivered")
	}
	if _, err := take(t, dir, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take from an empty inbox: %v, want a timeout", err)
	}
	// A reader that fails to use a message leaves it for the next.
	_, _ = inbox.Deliver(dir, 9, "third")
	err := inbox.Take(context.Background(), dir, time.Millisecond, func(int64, []byte) error { return errors.New("stdout closed") })
	if err == nil {
		t.Fatal("want the reader's error")
	}
	if got, _ := take(t, dir, time.Second); got != "third" {
		t.Fatalf("took %q after a failed read, want third", got)
	}
}

// Many readers at once still read every message exactly once.
func TestConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	if err := inbox.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = inbox.Take(context.Background(), dir, time.Millisecond, func(id int64, _ []byte) error {
				mu.Lock()
				got = append(got, id)
				mu.Unlock()
				return nil
			})
		}()
	}
	for i := int64(1); i <= n; i++ {
		if _, err := inbox.Deliver(dir, i, "m"); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	for i, id := range got {
		if id != int64(i+1) {
			t.Fatalf("messages read %v, want 1..%d once each", got, n)
		}
	}
	if len(got) != n {
		t.Fatalf("%d messages read, want %d", len(got), n)
	}
}
