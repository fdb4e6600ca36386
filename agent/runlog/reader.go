package runlog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// readAhead is how much of the file a reader fetches at once. Tasks that
// print a line at a time make records of a few bytes; reading them one
// syscall each would cost more than the copying.
const readAhead = 256 << 10

// Record is one record read back. Data is only valid until the next call to
// Next.
type Record struct {
	Stream Stream
	// Offset is the stream position of Data[0]. It is past the record's own
	// offset when the reader resumed inside the record and skipped what was
	// already consumed.
	Offset uint64
	Data   []byte
	// Exit is set on the exit record, which has no stream or data.
	Exit *Exit
	// Start and End are the record's byte positions in the file.
	Start, End int64
}

// Reader reads records from a runner log that may still be growing.
type Reader struct {
	src    io.ReaderAt
	pos    Position
	buf    []byte
	bufOff int64 // file position of buf[0]
}

// NewReader reads src from pos. Records (or parts of them) that pos says
// were consumed already are skipped.
func NewReader(src io.ReaderAt, pos Position) (*Reader, error) {
	if pos.File < 0 {
		return nil, fmt.Errorf("runlog: negative file position %d", pos.File)
	}
	return &Reader{src: src, pos: pos}, nil
}

// Position is where the reader stands: after the last record Next returned.
func (r *Reader) Position() Position { return r.pos }

// Next returns the next record with unconsumed data, or the exit record. It
// returns io.EOF when no complete record is there yet — the runner may still
// be writing it, so calling again later can succeed — and an error wrapping
// ErrCorrupt when the file holds damage at the reader's position.
func (r *Reader) Next() (Record, error) {
	if r.pos.File < int64(len(Magic)) {
		b, err := r.window(0, len(Magic))
		if err != nil {
			return Record{}, err
		}
		if string(b) != Magic {
			return Record{}, fmt.Errorf("%w: the file does not start with %q", ErrCorrupt, Magic)
		}
		r.pos.File = int64(len(Magic))
	}
	for {
		start := r.pos.File
		h, err := r.window(start, headerLen)
		if err != nil {
			return Record{}, err
		}
		kind := h[0]
		offset := binary.BigEndian.Uint64(h[1:9])
		n := binary.BigEndian.Uint32(h[9:13])
		if kind < 1 || kind > kindExit || n > maxReadable {
			return Record{}, fmt.Errorf("%w at byte %d: a record of kind %d and length %d", ErrCorrupt, start, kind, n)
		}
		if offset > math.MaxUint64-uint64(n) {
			// No stream reaches 2^64 bytes: the offset is damage (or the
			// task's own writing), and taken as it is it would wrap the
			// consumed count around and hand on bytes twice.
			return Record{}, fmt.Errorf("%w at byte %d: a record at stream offset %d with %d bytes runs past the largest offset", ErrCorrupt, start, offset, n)
		}
		total := headerLen + int(n) + trailerLen
		b, err := r.window(start, total)
		if err != nil {
			return Record{}, err
		}
		body := b[:headerLen+int(n)]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[headerLen+int(n):]) {
			return Record{}, fmt.Errorf("%w at byte %d: checksum mismatch", ErrCorrupt, start)
		}
		end := start + int64(total)
		data := body[headerLen:]
		if kind == kindExit {
			var e Exit
			if err := json.Unmarshal(data, &e); err != nil {
				return Record{}, fmt.Errorf("%w at byte %d: exit record: %v", ErrCorrupt, start, err)
			}
			r.pos.File = end
			return Record{Exit: &e, Start: start, End: end}, nil
		}
		s := Stream(kind)
		skip := uint64(0)
		if c := r.pos.consumed(s); c > offset {
			skip = min(c-offset, uint64(n))
		}
		r.pos.File = end
		r.pos.setConsumed(s, max(r.pos.consumed(s), offset+uint64(n)))
		if skip == uint64(n) {
			continue // consumed before the reader resumed
		}
		return Record{Stream: s, Offset: offset + skip, Data: data[skip:], Start: start, End: end}, nil
	}
}

// window returns n bytes of the file at off, reading more of it when the
// buffer does not hold them. Fewer than n bytes in the file is io.EOF.
func (r *Reader) window(off int64, n int) ([]byte, error) {
	if off >= r.bufOff && off+int64(n) <= r.bufOff+int64(len(r.buf)) {
		i := off - r.bufOff
		return r.buf[i : i+int64(n)], nil
	}
	size := max(n, readAhead)
	if cap(r.buf) < size {
		r.buf = make([]byte, size)
	}
	r.buf = r.buf[:size]
	got, err := r.src.ReadAt(r.buf, off)
	r.buf = r.buf[:got]
	r.bufOff = off
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if got < n {
		return nil, io.EOF
	}
	return r.buf[:n], nil
}

// FindExit reads src from pos to its current end and returns the exit record
// if there is one. An agent that finds a task's container gone uses it to
// tell a task that ended while nobody watched from one that was lost.
func FindExit(src io.ReaderAt, pos Position) (*Exit, error) {
	r, err := NewReader(src, pos)
	if err != nil {
		return nil, err
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if rec.Exit != nil {
			return rec.Exit, nil
		}
	}
}
