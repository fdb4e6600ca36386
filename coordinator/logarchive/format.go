package logarchive

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The archive format, version 1. An archive is one zstd stream of:
//
//	"PODIUMLOG"      9 bytes of magic
//	0x01             the format version
//	records          each a uvarint length (1 to MaxRecordBytes) and that many
//	                 bytes of a podium.v1.ArchivedEvent (its seq, and the event
//	                 as Events returns it, without its task id), in strictly
//	                 increasing seq
//	0x00             a zero length: the end marker
//	count            a uvarint: how many records came before it
//
// and nothing after. The end marker and count make a truncated archive an
// error rather than a shorter log, even when it was cut at a record boundary.
// A reader refuses another version: a new format is a new version byte, read
// alongside the old for as long as archives of the old may exist.
const (
	Magic   = "PODIUMLOG"
	Version = 1
	// MaxRecordBytes bounds one record. Events are bounded far below it
	// where they come in (a log chunk or note of 64 KiB); the bound is what
	// keeps a damaged or hostile archive from asking a reader for gigabytes.
	MaxRecordBytes = 1 << 20
	// maxWindow bounds the zstd window a reader accepts, and with it the
	// memory a decoder holds; the writer's window is below it.
	maxWindow   = 8 << 20
	writeWindow = 4 << 20
)

// ErrDamaged wraps every way an archive's bytes fail to be a valid archive.
var ErrDamaged = errors.New("the log archive is damaged")

// Encoder writes an archive.
type Encoder struct {
	zw    *zstd.Encoder
	buf   []byte
	count uint64
	last  uint64
	err   error
}

// encoders keeps zstd encoders between archives. Making one allocates its
// window and tables, several MiB, which cost more than compressing a small
// task's log: the archive job fell behind dispatch until encoders were
// reused. An encoder goes back only after a clean Close.
var encoders = sync.Pool{New: func() any {
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(writeWindow),
		zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		// The options are constants that zstd accepts; a refusal is a bug.
		panic(fmt.Sprintf("log archive: zstd refused the encoder options: %v", err))
	}
	return zw
}}

// NewEncoder starts an archive on w, writing its header.
func NewEncoder(w io.Writer) (*Encoder, error) {
	zw := encoders.Get().(*zstd.Encoder)
	zw.Reset(w)
	e := &Encoder{zw: zw}
	if _, err := zw.Write(append([]byte(Magic), Version)); err != nil {
		return nil, err
	}
	return e, nil
}

// Write appends one event at position seq, which must be past the last.
func (e *Encoder) Write(seq uint64, ev *podiumv1.TaskEvent) error {
	if e.err != nil {
		return e.err
	}
	if seq == 0 || (e.count > 0 && seq <= e.last) {
		e.err = fmt.Errorf("log archive: event at position %d after %d: positions must increase", seq, e.last)
		return e.err
	}
	if ev.GetTaskId() != "" {
		ev = proto.CloneOf(ev)
		ev.TaskId = ""
	}
	rec, err := proto.MarshalOptions{Deterministic: true}.Marshal(&podiumv1.ArchivedEvent{Seq: seq, Event: ev})
	if err != nil {
		e.err = err
		return err
	}
	if len(rec) > MaxRecordBytes {
		e.err = fmt.Errorf("log archive: the event at position %d is %d bytes, more than the %d a record may be", seq, len(rec), MaxRecordBytes)
		return e.err
	}
	e.buf = binary.AppendUvarint(e.buf[:0], uint64(len(rec)))
	e.buf = append(e.buf, rec...)
	if _, err := e.zw.Write(e.buf); err != nil {
		e.err = err
		return err
	}
	e.count++
	e.last = seq
	return nil
}

// Count is how many events were written.
func (e *Encoder) Count() uint64 { return e.count }

// Close writes the end marker and finishes the zstd stream. It does not close
// the underlying writer.
func (e *Encoder) Close() error {
	if e.zw == nil {
		return e.err
	}
	if e.err != nil {
		_ = e.zw.Close()
		return e.err
	}
	e.buf = append(e.buf[:0], 0)
	e.buf = binary.AppendUvarint(e.buf, e.count)
	if _, err := e.zw.Write(e.buf); err != nil {
		_ = e.zw.Close()
		return err
	}
	if err := e.zw.Close(); err != nil {
		return err
	}
	encoders.Put(e.zw)
	e.zw, e.err = nil, errors.New("log archive: the encoder is closed")
	return nil
}

// Decoder reads an archive one event at a time, holding one record (and the
// zstd window) in memory, whatever the log's size.
type Decoder struct {
	zr    *zstd.Decoder
	br    *bufio.Reader
	buf   []byte
	count uint64
	last  uint64
	done  bool
}

// NewDecoder checks the archive's header on r. Close it when done.
func NewDecoder(r io.Reader) (*Decoder, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDamaged, err)
	}
	d := &Decoder{zr: zr, br: bufio.NewReaderSize(zr, 64<<10)}
	head := make([]byte, len(Magic)+1)
	if _, err := io.ReadFull(d.br, head); err != nil {
		zr.Close()
		return nil, damaged("no header", err)
	}
	if string(head[:len(Magic)]) != Magic {
		zr.Close()
		return nil, fmt.Errorf("%w: it does not start with %q", ErrDamaged, Magic)
	}
	if v := head[len(Magic)]; v != Version {
		zr.Close()
		return nil, fmt.Errorf("%w: format version %d, this coordinator reads version %d: upgrade it", ErrDamaged, v, Version)
	}
	return d, nil
}

func damaged(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %s: %v", ErrDamaged, what, err)
}

// Next returns the next event and its position, and io.EOF after the last
// one once the end marker, the count and the end of the stream all check
// out. The event is the caller's.
func (d *Decoder) Next() (uint64, *podiumv1.TaskEvent, error) {
	if d.done {
		return 0, nil, io.EOF
	}
	n, err := binary.ReadUvarint(d.br)
	if err != nil {
		return 0, nil, damaged(fmt.Sprintf("after record %d", d.count), err)
	}
	if n == 0 {
		return 0, nil, d.end()
	}
	if n > MaxRecordBytes {
		return 0, nil, fmt.Errorf("%w: record %d claims %d bytes, more than the %d a record may be", ErrDamaged, d.count+1, n, MaxRecordBytes)
	}
	if uint64(cap(d.buf)) < n {
		d.buf = make([]byte, n)
	}
	d.buf = d.buf[:n]
	if _, err := io.ReadFull(d.br, d.buf); err != nil {
		return 0, nil, damaged(fmt.Sprintf("record %d", d.count+1), err)
	}
	var rec podiumv1.ArchivedEvent
	if err := proto.Unmarshal(d.buf, &rec); err != nil {
		return 0, nil, damaged(fmt.Sprintf("record %d", d.count+1), err)
	}
	if rec.Seq == 0 || (d.count > 0 && rec.Seq <= d.last) {
		return 0, nil, fmt.Errorf("%w: record %d is at position %d, after %d", ErrDamaged, d.count+1, rec.Seq, d.last)
	}
	if rec.Event == nil {
		rec.Event = &podiumv1.TaskEvent{}
	}
	d.count++
	d.last = rec.Seq
	return rec.Seq, rec.Event, nil
}

func (d *Decoder) end() error {
	count, err := binary.ReadUvarint(d.br)
	if err != nil {
		return damaged("the end marker has no count", err)
	}
	if count != d.count {
		return fmt.Errorf("%w: it ends saying %d records, %d were read", ErrDamaged, count, d.count)
	}
	// Reading to the end is also what makes zstd check the frame's checksum.
	var one [1]byte
	if n, err := io.ReadFull(d.br, one[:]); n > 0 || !errors.Is(err, io.EOF) {
		if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: bytes follow the end marker", ErrDamaged)
		}
		return damaged("after the end marker", err)
	}
	d.done = true
	return io.EOF
}

// Close releases the decoder.
func (d *Decoder) Close() { d.zr.Close() }
