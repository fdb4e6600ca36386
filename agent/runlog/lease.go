package runlog

// The lease file: how long the agent lets a runner go on without hearing
// from it.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An agent fences a task the control plane will run again elsewhere when the
// node has been cut off from every coordinator replica for as long as the
// control plane takes to declare it offline: it stops the attempt first, so
// that two attempts never run at once. An agent that hangs (a stopped
// process, a machine swapping itself to death, a debugger attached) cannot
// do that, and its tasks would run on beside their new attempts. The lease
// file is the runner's half of fencing: the agent writes into it the moment
// at which it would fence the attempt, moving it on each time a replica
// answers, and the runner, PID 1 of the task's container, stops the command
// itself once that moment has passed.
//
// The moment is on the host's boot clock (CLOCK_BOOTTIME, BootTime), which
// the agent and every container on the host read alike: unlike the wall
// clock, no NTP step or date(1) moves it, so a clock set forward cannot fence
// a healthy task; and unlike CLOCK_MONOTONIC it goes on through a suspend,
// as the control plane's clock does while the machine sleeps.
//
// The file holds 20 bytes: the moment (nanoseconds on the boot clock, 8
// bytes, big-endian; 0 for never: the attempt is not fenced, or the agent
// does not yet know the control plane's thresholds), the grace the command
// gets between SIGTERM and SIGKILL (nanoseconds, 8 bytes) and the CRC-32C of
// those 16 (4 bytes). The agent rewrites them in place, like the progress
// file, and the file is mounted read-only into the container, so the task
// cannot move its own fence; a reader that catches a rewrite half done sees a
// checksum mismatch and reads again later.
const leaseLen = 20

// Lease is what a lease file holds.
type Lease struct {
	// Deadline is when the runner fences, on the boot clock (BootTime);
	// zero is never.
	Deadline time.Duration
	// Grace is how long the command has, after SIGTERM, to end before
	// everything in the container is killed.
	Grace time.Duration
}

// BootTime reads the host's boot clock (CLOCK_BOOTTIME).
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Linux has had CLOCK_BOOTTIME since 2.6.39; nothing Podium runs
		// on lacks it.
		panic("runlog: clock_gettime(CLOCK_BOOTTIME): " + err.Error())
	}
	return time.Duration(ts.Nano())
}

// LeaseUntil is a lease that runs out at at (read on this process's clock,
// as time.Now gives it), with grace.
func LeaseUntil(at time.Time, grace time.Duration) Lease {
	return Lease{Deadline: max(BootTime()+time.Until(at), 1), Grace: grace}
}

// RunOut reports whether a lease that fences has passed its deadline, and
// how long ago.
func (l Lease) RunOut() (bool, time.Duration) {
	if l.Deadline <= 0 {
		return false, 0
	}
	past := BootTime() - l.Deadline
	return past >= 0, past
}

// CreateLease makes a lease file at path that never fences. It is readable by
// everyone: the runner runs as whatever user the task's image names.
func CreateLease(path string) error {
	if err := os.WriteFile(path, encodeLease(Lease{}), 0o644); err != nil {
		return err
	}
	return os.Chmod(path, 0o644) // the umask had its say at creation
}

func encodeLease(l Lease) []byte {
	b := make([]byte, leaseLen)
	binary.BigEndian.PutUint64(b, uint64(max(l.Deadline, 0)))
	binary.BigEndian.PutUint64(b[8:], uint64(max(l.Grace, 0)))
	binary.BigEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

// ReadLease reads a lease file. A file caught half rewritten is
// ErrTornProgress, as a progress file is: read it again later.
func ReadLease(f io.ReaderAt) (Lease, error) {
	var b [leaseLen]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return Lease{}, err
	}
	if crc32.Checksum(b[:16], castagnoli) != binary.BigEndian.Uint32(b[16:]) {
		return Lease{}, ErrTornProgress
	}
	deadline, grace := int64(binary.BigEndian.Uint64(b[:8])), int64(binary.BigEndian.Uint64(b[8:16]))
	if deadline < 0 || grace < 0 {
		return Lease{}, ErrTornProgress
	}
	return Lease{Deadline: time.Duration(deadline), Grace: time.Duration(grace)}, nil
}

// WriteLease rewrites the lease file at path in place. Like OpenProgress it
// follows no symbolic link and writes nothing but a regular file: the file
// sits in the task's directory on the host and the agent runs as root.
func WriteLease(path string, l Lease) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	_, err = f.WriteAt(encodeLease(l), 0)
	return err
}
