package runlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Writer appends records to a runner log. It is safe for concurrent use:
// stdout and stderr are copied by two goroutines.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	next [3]uint64 // next offset, by stream
	buf  []byte
}

// Create prepares an empty runner log at path, readable and writable by
// anyone: the runner runs as whatever user the task's image names, and
// without capabilities, so a file only its creator could write would shut
// out every task that does not run as the agent's own user. The directory
// that holds it is what keeps other users of the host away.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	_, err = f.WriteString(Magic)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, 0o666) // the umask had its say at creation
	}
	return err
}

// OpenWriter opens the runner log at path for appending, creating it if it
// does not exist. A log that already holds records (the container was started
// again) is continued: stream offsets carry on from where they stopped, a
// half-written record at its end is cut off, and an exit record is removed so
// the log's one exit record is again its last.
func OpenWriter(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f}
	if err := w.init(path); err != nil {
		_ = f.Close()
		return nil, err
	}
	return w, nil
}

func (w *Writer) init(path string) error {
	st, err := w.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		if _, err := w.f.WriteAt([]byte(Magic), 0); err != nil {
			return err
		}
		w.size = int64(len(Magic))
		return nil
	}
	magic := make([]byte, len(Magic))
	if _, err := w.f.ReadAt(magic, 0); err != nil || string(magic) != Magic {
		return fmt.Errorf("%s is not a runner log (it does not start with %q); remove it or give another file", path, Magic)
	}
	r, err := NewReader(w.f, Position{})
	if err != nil {
		return err
	}
	end := int64(len(Magic))
	for {
		rec, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, ErrCorrupt) {
				return err
			}
			break
		}
		if rec.Exit != nil {
			break
		}
		w.next[rec.Stream] = rec.Offset + uint64(len(rec.Data))
		end = rec.End
	}
	if err := w.f.Truncate(end); err != nil {
		return err
	}
	w.size = end
	return nil
}

// Write appends p to stream as one or more records. On an error nothing of
// the failed record stays in the file (a short write is cut off again), so
// the caller may simply retry.
func (w *Writer) Write(s Stream, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), MaxRecordData)
		if err := w.appendLocked(uint8(s), w.next[s], p[:n]); err != nil {
			return err
		}
		w.next[s] += uint64(n)
		p = p[n:]
	}
	return nil
}

// Exit appends the exit record and flushes the file to disk: it is the one
// record an agent that was down when the task ended depends on.
func (w *Writer) Exit(e Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.appendLocked(kindExit, 0, data); err != nil {
		return err
	}
	return w.f.Sync()
}

func (w *Writer) appendLocked(kind uint8, offset uint64, data []byte) error {
	w.buf = appendRecord(w.buf[:0], kind, offset, data)
	n, err := w.f.WriteAt(w.buf, w.size)
	if err != nil {
		if n > 0 {
			_ = w.f.Truncate(w.size)
		}
		return err
	}
	w.size += int64(n)
	return nil
}

// Size is the file's size: the magic and every record written.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

// Written is how many bytes of output the log holds, both streams together,
// counting what an earlier runner on the same log wrote.
func (w *Writer) Written() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next[Stdout] + w.next[Stderr]
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}
