// Package runlog is the file a task's runner writes the task's output and exit
// status into, on the host, and the agent reads back.
//
// The file is what makes a task's output survive the agent: the runner (PID 1
// in the task's container) writes it whether or not an agent is listening, so
// an agent that crashes, restarts or is upgraded picks up at the exact byte it
// had turned into events, and a task that ended while no agent ran still has
// its exit status on disk.
//
// # Format
//
// A file starts with the 16 bytes of Magic, followed by records:
//
//	kind    1 byte    1 stdout, 2 stderr, 3 exit
//	offset  8 bytes   big-endian: position of data[0] within its stream
//	length  4 bytes   big-endian: len(data), at most MaxRecordData
//	data    length bytes
//	crc     4 bytes   big-endian CRC-32C (Castagnoli) of kind..data
//
// Offsets count each stream's bytes from the first byte the task wrote to it,
// so consecutive records of one stream are contiguous and a reader that stops
// anywhere can say exactly where it stopped. The exit record (kind 3, offset
// 0) carries an Exit as JSON and is the last record of a file. Each record is
// written with one write(2), so a reader tailing the file sees at most one
// incomplete record, at the end, which it leaves for later; the CRC catches a
// tail a crash left half written.
package runlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Magic opens every runner log.
const Magic = "PODIUM-RUNLOG-1\n"

// MaxRecordData is the most data one record carries. It equals the largest
// chunk the agent sends, so a record never has to be split into two events.
const MaxRecordData = 32 << 10

// maxReadable is the largest record a reader accepts. Anything bigger is
// damage, not data: refusing it keeps a corrupted length from making the
// reader allocate gigabytes.
const maxReadable = 1 << 20

const (
	headerLen  = 13 // kind + offset + length
	trailerLen = 4  // crc
)

// Stream names an output stream of the task.
type Stream uint8

// The streams, as their record kinds.
const (
	Stdout Stream = 1
	Stderr Stream = 2
	// kindExit is the exit record's kind; it is not a stream.
	kindExit = 3
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("stream(%d)", uint8(s))
}

// Exit is how the task's main process ended, as the runner saw it.
type Exit struct {
	// Code is the exit status: the process's own, or 128+signal when a
	// signal killed it (what a shell reports), or 126/127 when the command
	// could not be started (Error says why).
	Code int `json:"code"`
	// Signal is the signal that killed the process, 0 if it exited.
	Signal int `json:"signal,omitempty"`
	// OOMKills is how many processes the kernel's OOM killer ended in the
	// container's memory cgroup while the task ran. Any is enough to call
	// the task's end out-of-memory: the killed process may have been a
	// child whose death the main process merely reported.
	OOMKills int `json:"oom_kills,omitempty"`
	// PidsRefused is how many new processes or threads the container's
	// pids limit refused while the task ran. The runner stops a task at
	// the first (see package runner), so any means the task ended because
	// it reached its limit.
	PidsRefused int `json:"pids_refused,omitempty"`
	// PidsLimit is the limit that refused them, as the container's cgroup
	// read; 0 when it could not be read.
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// DiskFull reports that the runner stopped the command because the
	// log had no room for its output for longer than it was told to wait.
	DiskFull bool `json:"disk_full,omitempty"`
	// Fenced reports that the runner stopped the command because the
	// agent's lease on it ran out (see the lease file): the agent had not
	// heard from the control plane, or not been heard from, for as long
	// as the control plane takes to run the attempt again elsewhere.
	Fenced bool `json:"fenced,omitempty"`
	// CPUMicros is the CPU time of everything in the container's cgroup,
	// in microseconds, and PeakMemory its highest memory use in bytes, as
	// the runner read them just before writing this record (see
	// runner.readUsage). Nil is unknown: not PID 1 of a container, no
	// cgroup file to read (memory.peak needs Linux 5.19). The task can
	// write this file too, so the agent bounds both before it reports them
	// (executor's usage.go).
	CPUMicros  *int64 `json:"cpu_usec,omitempty"`
	PeakMemory *int64 `json:"peak_memory,omitempty"`
	// Error is why the command could not be started, if it was not.
	Error string `json:"error,omitempty"`
	// Time is when the runner saw the process end.
	Time time.Time `json:"time"`
}

// Position is where a reader is in a runner log: File is the byte position
// of the first record not yet wholly consumed, and Stdout and Stderr are how
// many bytes of each stream have been consumed. A record at File may be
// partly consumed already; its consumed bytes are skipped when reading
// resumes. The zero Position is the start of the file.
type Position struct {
	File   int64  `json:"file"`
	Stdout uint64 `json:"stdout"`
	Stderr uint64 `json:"stderr"`
}

func (p Position) consumed(s Stream) uint64 {
	if s == Stderr {
		return p.Stderr
	}
	return p.Stdout
}

func (p *Position) setConsumed(s Stream, n uint64) {
	if s == Stderr {
		p.Stderr = n
	} else {
		p.Stdout = n
	}
}

// ErrCorrupt means the file holds something that is not a runner log record
// where one should be: a damaged disk, or a task that wrote into its own log.
// Nothing after it can be trusted.
var ErrCorrupt = errors.New("runlog: corrupt runner log")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord encodes one record onto b.
func appendRecord(b []byte, kind uint8, offset uint64, data []byte) []byte {
	start := len(b)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, offset)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// WithConsumed returns p with n bytes of stream s consumed. A reader that
// hands on part of a record uses it to say where inside the record it
// stopped.
func (p Position) WithConsumed(s Stream, n uint64) Position {
	p.setConsumed(s, n)
	return p
}
