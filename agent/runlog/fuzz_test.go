package runlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"testing"
)

// fixCRCs returns data with every record's CRC recomputed, so that the
// fuzzer's changes to a header or a payload reach the code that reads them
// instead of all ending as a checksum mismatch.
func fixCRCs(data []byte) []byte {
	out := append([]byte(nil), data...)
	pos := 0
	if bytes.HasPrefix(out, []byte(Magic)) {
		pos = len(Magic)
	}
	for len(out)-pos >= headerLen+trailerLen {
		n := binary.BigEndian.Uint32(out[pos+9:])
		if n > maxReadable || len(out)-pos < headerLen+int(n)+trailerLen {
			break
		}
		end := pos + headerLen + int(n)
		binary.BigEndian.PutUint32(out[end:], crc32.Checksum(out[pos:end], castagnoli))
		pos = end + trailerLen
	}
	return out
}

// FuzzRead feeds the reader what a task can write into its own runner log (the
// file is writable from inside the container), resuming from any position.
// Whatever the bytes, the reader must not panic; it must fail only with
// io.EOF or ErrCorrupt; every record it returns lies inside the file and
// after the one before, the position never moving back; its data is within the stream's 64-bit offsets; and
// the position it reports covers what it returned, so that an agent resuming
// from it never hands on the same bytes twice.
func FuzzRead(f *testing.F) {
	rec := func(kind uint8, off uint64, data string) []byte { return appendRecord(nil, kind, off, []byte(data)) }
	join := func(recs ...[]byte) []byte { return bytes.Join(append([][]byte{[]byte(Magic)}, recs...), nil) }
	seeds := [][]byte{
		nil,
		[]byte(Magic),
		join(rec(1, 0, "one\n"), rec(2, 0, "err\n"), rec(1, 4, "two\n")),
		join(rec(1, 0, "out"), rec(kindExit, 0, `{"code":3,"time":"2026-01-02T03:04:05Z"}`)),
		join(rec(1, 0, "out"), []byte{1, 0, 0}),                                          // a torn tail
		join(rec(1, math.MaxUint64-2, "overflow")),                                       // offset + length past 2^64
		join(rec(2, math.MaxUint64, "x")),                                                // the last offset there is
		join(rec(kindExit, 0, "not json")),                                               // a broken exit record
		join(rec(9, 0, "what?")),                                                         // an unknown kind
		append(join(rec(1, 0, "hi")), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), // a huge length
		[]byte("not a runner log at all"),
	}
	for _, s := range seeds {
		f.Add(s, int64(0), uint64(0), uint64(0))
	}
	f.Add(seeds[2], int64(len(Magic)), uint64(2), uint64(0))
	f.Add(seeds[2], int64(len(Magic)+17), uint64(4), uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, file int64, stdout, stderr uint64) {
		if file < 0 {
			if _, err := NewReader(bytes.NewReader(data), Position{File: file}); err == nil {
				t.Fatalf("NewReader took a negative file position %d", file)
			}
			return
		}
		for _, d := range [][]byte{data, fixCRCs(data)} {
			readAllChecked(t, d, Position{File: file, Stdout: stdout, Stderr: stderr})
		}
	})
}

func readAllChecked(t *testing.T, data []byte, pos Position) {
	r, err := NewReader(bytes.NewReader(data), pos)
	if err != nil {
		t.Fatalf("NewReader(%+v): %v", pos, err)
	}
	last := int64(-1)
	for {
		before := r.Position()
		rec, err := r.Next()
		if after := r.Position(); after.File < before.File || after.File > max(before.File, int64(len(data))) {
			// Skipping records consumed before the reader resumed moves it
			// on, even when the next one is not complete yet; nothing
			// moves it back or past the end of the file.
			t.Fatalf("the position moved from %+v to %+v in a %d-byte file", before, after, len(data))
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Next failed with %v, which is neither io.EOF nor ErrCorrupt", err)
			}
			return
		}
		if rec.Start < last || rec.End <= rec.Start || rec.End > int64(len(data)) {
			t.Fatalf("record at %d..%d of a %d-byte file, after one that ended at %d", rec.Start, rec.End, len(data), last)
		}
		last = rec.End
		if r.Position().File != rec.End {
			t.Fatalf("position %d after a record that ends at %d", r.Position().File, rec.End)
		}
		if rec.Exit != nil {
			return
		}
		if len(rec.Data) == 0 {
			t.Fatalf("an empty record at %d was returned", rec.Start)
		}
		if rec.Offset > math.MaxUint64-uint64(len(rec.Data)) {
			t.Fatalf("record at %d: offset %d + %d bytes overflows the stream's offsets", rec.Start, rec.Offset, len(rec.Data))
		}
		if end, c := rec.Offset+uint64(len(rec.Data)), r.Position().consumed(rec.Stream); c < end {
			t.Fatalf("record at %d ends at stream offset %d, but the position says %d bytes of %s were consumed", rec.Start, end, c, rec.Stream)
		}
		if c := before.consumed(rec.Stream); rec.Offset < c {
			t.Fatalf("record at %d hands on stream offset %d again (%d were consumed)", rec.Start, rec.Offset, c)
		}
	}
}
