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
//
// # The task writes this directory
//
// The agent, as root, reads the cursor and writes messages in a directory the
// task can fill with anything: a link to the node's identity file named
// .cursor, a FIFO, a device, a file of gigabytes. Every file here is therefore
// opened through package taskfile (no link followed, nothing but a regular
// file opened, a bound on what is read, messages written to fresh files
// renamed into place), and an error says what is wrong with a file, never
// what it holds. The reader inside the task goes the same way, so the two
// agree on what the inbox holds.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent/taskfile"
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
// and must still be able to take the lock and move the cursor. It runs
// before the task's container starts, but an inbox made earlier is treated as
// the task's all the same: the lock is written fresh (package taskfile), so
// nothing planted under its name is followed or opened.
func Prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	d, err := taskfile.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFile(lockFile, nil, 0o666)
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
//
// The agent calls it as root, in a directory the task writes, so it goes
// through package taskfile: the cursor is read only if it is a regular file
// of at most maxCursorBytes (a link, FIFO or device under its name is an
// error, not a hang or a read of the node's files), the message is written to
// a fresh file renamed into place, and no error quotes what the task left.
func Deliver(dir string, id int64, text string) (bool, error) {
	if id <= 0 {
		return false, fmt.Errorf("inbox: message id %d: ids start at 1", id)
	}
	d, err := taskfile.OpenDir(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	st, err := d.Lstat(Name(id))
	switch {
	case err == nil && st.Mode().IsRegular():
		return false, nil
	case err == nil:
		// Not a message: what the task left there is replaced below.
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("%s: %w", Name(id), reason(err))
	}
	cur, err := readCursor(d)
	if err != nil {
		return false, err
	}
	if id <= cur {
		return false, nil
	}
	if err := d.WriteFile(Name(id), []byte(text), 0o644); err != nil {
		return false, fmt.Errorf("%s: %w", Name(id), reason(err))
	}
	return true, nil
}

// maxCursorBytes bounds what is read of the cursor: a message id has at most
// 19 digits, and the line a newline.
const maxCursorBytes = 64

// maxMessageBytes bounds what a reader reads of one message: far more than
// the coordinator accepts (64 KiB), far less than would hurt.
const maxMessageBytes = 1 << 20

// reason is what went wrong with a file of the inbox without the host path,
// which means nothing to the task's owner, who may read it in a note.
func reason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readCursor reads the cursor: 0 when there is none yet. Its content is
// never quoted back: the task wrote it.
func readCursor(d *taskfile.Dir) (int64, error) {
	b, err := d.ReadFile(cursorFile, maxCursorBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", cursorFile, reason(err))
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s does not hold a message id (%d bytes)", cursorFile, len(b))
	}
	return n, nil
}

func writeCursor(d *taskfile.Dir, id int64) error {
	return d.WriteFile(cursorFile, []byte(strconv.FormatInt(id, 10)+"\n"), 0o666)
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
	lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		return false, fmt.Errorf("open the inbox's lock (is %s the task's inbox?): %w", dir, err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock the inbox: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()

	d, err := taskfile.OpenDir(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	cur, err := readCursor(d)
	if err != nil {
		return false, err
	}
	entries, err := d.ReadDir(".")
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
	text, err := d.ReadFile(Name(ids[0]), maxMessageBytes)
	if err != nil {
		return false, fmt.Errorf("%s: %w", Name(ids[0]), reason(err))
	}
	if err := use(ids[0], text); err != nil {
		return false, err
	}
	return true, writeCursor(d, ids[0])
}
