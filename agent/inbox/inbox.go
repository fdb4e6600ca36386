// Package inbox is a task's inbox: messages people send a running task
// (`podium task send`), which the agent writes into a directory on the host
// and the task reads, inside its container, with `podium-runner ask`.
//
// # Layout
//
// The directory is bind-mounted into the task's container at ContainerDir.
// It holds:
//
//	00000000000000000042.msg   one file per message, named by its message id
//	                           zero-padded to 20 digits, holding the text
//	.cursor                    the id of the last message a reader consumed
//	.lock                      flock(2)ed by a reader while it consumes
//
// The agent writes each message under a temporary name starting with "." and
// renames it into place, so a reader never sees half a message. Message ids
// grow with every message a task is sent, so the zero-padded names sort in the
// order the messages were sent. A reader takes the lowest id above the cursor,
// prints it and moves the cursor past it, all under the lock: every message
// is read once, in order, however many readers there are. Consumed messages
// stay in the directory (they are small, and a person debugging a task can
// read what it was sent); a message id at or below the cursor, or one already
// in the directory, is a repeat (the coordinator re-delivers after a
// reconnect) and is dropped.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ContainerDir is where the inbox appears inside the task's container.
const ContainerDir = "/run/podium/inbox"

// DirEnv names the environment variable that overrides ContainerDir for a
// reader, for running `podium-runner ask` outside a container.
const DirEnv = "PODIUM_INBOX"

const (
	cursorFile = ".cursor"
	lockFile   = ".lock"
	suffix     = ".msg"
	idDigits   = 20
)

// Prepare creates an inbox directory that any user can write, and its lock
// file. The task runs as whatever user its image names, without capabilities,
// and must still be able to take the lock and move the cursor.
func Prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	lock := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(lock, 0o666)
}

// Name is the file name of message id.
func Name(id int64) string { return fmt.Sprintf("%0*d%s", idDigits, id, suffix) }

func parseName(name string) (int64, bool) {
	if len(name) != idDigits+len(suffix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	id, err := strconv.ParseInt(name[:idDigits], 10, 64)
	return id, err == nil && id > 0
}

// Deliver writes message id into the inbox at dir. It reports false, and
// writes nothing, for a repeat: an id already there or already consumed.
func Deliver(dir string, id int64, text string) (bool, error) {
	if id <= 0 {
		return false, fmt.Errorf("inbox: message id %d: ids start at 1", id)
	}
	final := filepath.Join(dir, Name(id))
	if _, err := os.Stat(final); err == nil {
		return false, nil
	}
	cur, err := readCursor(dir)
	if err != nil {
		return false, err
	}
	if id <= cur {
		return false, nil
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+strconv.FormatInt(id, 10)+"-")
	if err != nil {
		return false, err
	}
	_, err = tmp.WriteString(text)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return false, err
	}
	return true, nil
}

func readCursor(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, cursorFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("inbox: %s holds %q, not a message id", filepath.Join(dir, cursorFile), s)
	}
	return n, nil
}

func writeCursor(dir string, id int64) error {
	tmp, err := os.CreateTemp(dir, ".cursor-")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(strconv.FormatInt(id, 10) + "\n")
	if err == nil {
		err = tmp.Chmod(0o666)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, cursorFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Take consumes the next unread message, waiting for one until ctx ends. use
// is called with the message while the inbox is locked, and the message
// counts as read only if it returns nil: a reader that fails to print it
// leaves it for the next.
func Take(ctx context.Context, dir string, poll time.Duration, use func(id int64, text []byte) error) error {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	for {
		done, err := takeOnce(dir, use)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func takeOnce(dir string, use func(int64, []byte) error) (bool, error) {
	lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return false, fmt.Errorf("open the inbox's lock (is %s the task's inbox?): %w", dir, err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock the inbox: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()

	cur, err := readCursor(dir)
	if err != nil {
		return false, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	var ids []int64
	for _, e := range entries {
		if id, ok := parseName(e.Name()); ok && id > cur {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return false, nil
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	text, err := os.ReadFile(filepath.Join(dir, Name(ids[0])))
	if err != nil {
		return false, err
	}
	if err := use(ids[0], text); err != nil {
		return false, err
	}
	return true, writeCursor(dir, ids[0])
}
