package runlog

// The progress file: how the agent tells a runner how far it has read.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"syscall"
)

// A runner log only grows, and a task can print faster than its output can
// be shipped: a coordinator that is down, a slow network, a task running
// `yes`. Without a bound the agent would buffer it (memory) or the runner
// would write it (the host's disk) until one of them ran out. The progress
// file is the bound's other half: the agent writes into it the file position
// up to which it has read the runner log, and the runner, before each record,
// stops writing while the part of the log the agent has not read is bigger
// than its backlog. Its copy of the task's output pipe then stops too, the
// pipe fills, and the task blocks in write(2): a task that prints too fast is
// slowed down to the speed its output is shipped at, and nothing is dropped.
//
// The file holds 12 bytes: the position (8 bytes, big-endian) and the
// CRC-32C of those 8 (4 bytes, big-endian). The agent rewrites them in place
// (the file is bind-mounted read-only into the container, so it cannot be
// replaced, and the task cannot write it); a reader that catches a rewrite
// half done sees a checksum mismatch and reads again later.
const progressLen = 12

// ErrTornProgress is what ReadProgress returns for a progress file caught
// half rewritten (or damaged): read it again later.
var ErrTornProgress = errors.New("runlog: the progress file is being rewritten")

// CreateProgress makes a progress file at path saying nothing was read yet.
// It is readable by everyone, for the same reason Create makes the log
// writable by everyone: the runner runs as whatever user the task's image
// names.
func CreateProgress(path string) error {
	if err := os.WriteFile(path, encodeProgress(0), 0o644); err != nil {
		return err
	}
	return os.Chmod(path, 0o644) // the umask had its say at creation
}

func encodeProgress(pos int64) []byte {
	b := make([]byte, progressLen)
	binary.BigEndian.PutUint64(b, uint64(pos))
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	return b
}

// ReadProgress reads the position a progress file holds.
func ReadProgress(f io.ReaderAt) (int64, error) {
	var b [progressLen]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return 0, err
	}
	if crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]) {
		return 0, ErrTornProgress
	}
	pos := binary.BigEndian.Uint64(b[:8])
	if pos > 1<<62 {
		return 0, ErrTornProgress
	}
	return int64(pos), nil
}

// ProgressWriter is the agent's end of a progress file.
type ProgressWriter struct {
	f    *os.File
	last int64
}

// OpenProgress opens the progress file at path for rewriting. It follows no
// symbolic link and takes nothing but a regular file: the file sits in the
// task's directory on the host, and the agent, which runs as root, must not
// be pointed at another file.
func OpenProgress(path string) (*ProgressWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return &ProgressWriter{f: f, last: -1}, nil
}

// Set records that the log was read up to pos.
func (p *ProgressWriter) Set(pos int64) error {
	if pos == p.last {
		return nil
	}
	if _, err := p.f.WriteAt(encodeProgress(pos), 0); err != nil {
		return err
	}
	p.last = pos
	return nil
}

// Close closes the file.
func (p *ProgressWriter) Close() error { return p.f.Close() }
