package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/taskfile"
	"github.com/podiumhq/podium/test/testenv/wait"
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

// TestHostileCursorIsRefused: the inbox is the task's to write, and the agent
// reads its cursor as root. Whatever the task leaves as .cursor, Deliver
// answers at once, with an error that does not quote any file, and reads
// nothing it should not.
func TestHostileCursorIsRefused(t *testing.T) {
	t.Parallel()
	const secret = "NODE-KEY-7d41-do-not-leak"
	node := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(node, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(cursor string) error
		want  error
	}{
		{"symlink to the node's key", func(c string) error { return os.Symlink(node, c) }, taskfile.ErrSymlink},
		{"symlink to /dev/zero", func(c string) error { return os.Symlink("/dev/zero", c) }, taskfile.ErrSymlink},
		{"FIFO", func(c string) error { return syscall.Mkfifo(c, 0o666) }, taskfile.ErrNotRegular},
		{"directory", func(c string) error { return os.Mkdir(c, 0o777) }, taskfile.ErrNotRegular},
		{"huge file", func(c string) error { return os.WriteFile(c, bytes.Repeat([]byte("9"), 10<<20), 0o666) }, taskfile.ErrTooLarge},
		{"not a number", func(c string) error { return os.WriteFile(c, []byte(secret), 0o666) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "inbox")
			if err := inbox.Prepare(dir); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(filepath.Join(dir, ".cursor")); err != nil {
				t.Fatal(err)
			}
			type result struct {
				ok  bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				ok, err := inbox.Deliver(dir, 1, "hello")
				done <- result{ok, err}
			}()
			r := wait.Recv(t, 5*time.Second, "Deliver to answer", done)
			if r.ok || r.err == nil || tc.want != nil && !errors.Is(r.err, tc.want) {
				t.Fatalf("Deliver = %v, %v; want an error (%v)", r.ok, r.err, tc.want)
			}
			if strings.Contains(r.err.Error(), secret) {
				t.Fatalf("the error quotes the file: %v", r.err)
			}
			if !strings.Contains(r.err.Error(), ".cursor") {
				t.Errorf("the error %q does not name the cursor", r.err)
			}
			if _, err := os.Lstat(filepath.Join(dir, inbox.Name(1))); err == nil {
				t.Error("a message was written although the cursor could not be read")
			}
		})
	}
}

// Names the task planted where the agent writes are replaced, never written
// through.
func TestDeliverReplacesWhatWasPlanted(t *testing.T) {
	t.Parallel()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "inbox")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".lock", inbox.Name(1)} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, inbox.Name(2)), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 2; id++ {
		if ok, err := inbox.Deliver(dir, id, "message"); !ok || err != nil {
			t.Fatalf("Deliver %d over what the task planted: %v, %v", id, ok, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Fatalf("a planted link was written through: the node's file holds %q", b)
	}
	for _, want := range []string{"message", "message"} {
		if got, err := take(t, dir, 5*time.Second); got != want || err != nil {
			t.Fatalf("took %q (%v), want %q", got, err, want)
		}
	}
}
