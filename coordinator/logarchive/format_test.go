package logarchive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func sampleEvents() []*podiumv1.TaskEvent {
	exit := int32(3)
	return []*podiumv1.TaskEvent{
		{Seq: 1, Attempt: 1, Time: timestamppb.Now(), Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_RUNNING}}},
		{Seq: 2, Attempt: 1, Time: timestamppb.Now(), Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Data: []byte{0, 0xff, 0xfe, '\n', 0x80}}}},
		{Seq: 3, Attempt: 1, Time: timestamppb.Now(), Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDERR, Offset: 7, Data: []byte("err\n")}}},
		{Attempt: 1, Time: timestamppb.Now(), Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: "artifact out.bin stored"}}},
		{Seq: 4, Attempt: 1, Time: timestamppb.Now(), Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "exit 3", ExitCode: &exit, Signal: 9}}},
	}
}

func encode(t *testing.T, seqs []uint64, evs []*podiumv1.TaskEvent) []byte {
	t.Helper()
	var buf bytes.Buffer
	e, err := NewEncoder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if err := e.Write(seqs[i], ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodeAll(b []byte) ([]uint64, []*podiumv1.TaskEvent, error) {
	d, err := NewDecoder(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	var seqs []uint64
	var evs []*podiumv1.TaskEvent
	for {
		seq, ev, err := d.Next()
		if errors.Is(err, io.EOF) {
			return seqs, evs, nil
		}
		if err != nil {
			return seqs, evs, err
		}
		seqs, evs = append(seqs, seq), append(evs, ev)
	}
}

// Every field of every kind of event comes back as it went in, binary output
// included, and at the positions it was written at (which may skip).
func TestArchiveRoundTrip(t *testing.T) {
	evs := sampleEvents()
	seqs := []uint64{1, 2, 5, 6, 9}
	b := encode(t, seqs, evs)
	gotSeqs, got, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("decoded %d events, wrote %d", len(got), len(evs))
	}
	for i := range evs {
		if gotSeqs[i] != seqs[i] || !proto.Equal(got[i], evs[i]) {
			t.Errorf("event %d: got %d %v, want %d %v", i, gotSeqs[i], got[i], seqs[i], evs[i])
		}
	}
	// An empty log is a valid archive too.
	if _, got, err := decodeAll(encode(t, nil, nil)); err != nil || len(got) != 0 {
		t.Errorf("empty archive: %v, %v", got, err)
	}
}

// The encoder refuses what it could not read back: positions that do not
// increase, and a record past MaxRecordBytes.
func TestArchiveEncoderRefuses(t *testing.T) {
	e, _ := NewEncoder(io.Discard)
	_ = e.Write(5, sampleEvents()[0])
	if err := e.Write(5, sampleEvents()[1]); err == nil || !strings.Contains(err.Error(), "positions must increase") {
		t.Errorf("a repeated position: %v", err)
	}
	e, _ = NewEncoder(io.Discard)
	big := &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: make([]byte, MaxRecordBytes)}}}
	if err := e.Write(1, big); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("an oversized event: %v", err)
	}
	if err := e.Close(); err == nil {
		t.Error("Close after a refused write succeeded")
	}
}

// zstdOf compresses raw bytes as an archive would be, so that a test can
// write archives the encoder would never write.
func zstdOf(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := zstd.NewWriter(&buf)
	_, _ = w.Write(raw)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A damaged or hostile archive is an ErrDamaged error, never a panic, a
// shorter log taken for the whole, or a huge allocation: every truncation of
// a valid archive, every single flipped byte (refused, or harmless), and
// hand-made bad contents.
func TestArchiveDecoderBadInput(t *testing.T) {
	evs := sampleEvents()
	good := encode(t, []uint64{1, 2, 3, 4, 5}, evs)
	for n := 0; n < len(good); n++ {
		if _, _, err := decodeAll(good[:n]); !errors.Is(err, ErrDamaged) {
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrDamaged", n, len(good), err)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x55
		// A flip in zstd's frame header (its window size, say) may leave the
		// content as it was; anything else must be refused. The reader also
		// checks the archive's SHA-256 before decoding it.
		if _, got, err := decodeAll(b); err == nil {
			if len(got) != len(evs) {
				t.Fatalf("byte %d flipped: decoded %d events without an error", i, len(got))
			}
			for j := range evs {
				if !proto.Equal(got[j], evs[j]) {
					t.Fatalf("byte %d flipped: event %d decoded as %v without an error", i, j, got[j])
				}
			}
		} else if !errors.Is(err, ErrDamaged) {
			t.Fatalf("byte %d flipped: %v, want ErrDamaged", i, err)
		}
	}
	rec, _ := proto.Marshal(&podiumv1.ArchivedEvent{Seq: 1, Event: evs[0]})
	head := append([]byte(Magic), Version)
	record := func(b []byte) []byte { return append(binary.AppendUvarint(nil, uint64(len(b))), b...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, c := range map[string]struct {
		raw  []byte
		says string
	}{
		"not an archive":      {[]byte("hello, world, this is not it"), "does not start with"},
		"a newer version":     {cat([]byte(Magic), []byte{2}), "format version 2"},
		"oversized record":    {cat(head, binary.AppendUvarint(nil, MaxRecordBytes+1)), "more than the"},
		"huge length varint":  {cat(head, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "after record 0"},
		"record cut short":    {cat(head, binary.AppendUvarint(nil, 100), rec), "record 1"},
		"not protobuf":        {cat(head, record([]byte{0xff, 0xff, 0xff})), "record 1"},
		"no end marker":       {cat(head, record(rec)), "after record 1"},
		"wrong count":         {cat(head, record(rec), []byte{0, 2}), "ends saying 2 records, 1 were read"},
		"bytes after the end": {cat(head, record(rec), []byte{0, 1, 'x'}), "bytes follow the end marker"},
		"position repeats":    {cat(head, record(rec), record(rec), []byte{0, 2}), "record 2 is at position 1, after 1"},
	} {
		_, _, err := decodeAll(zstdOf(t, c.raw))
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want ErrDamaged saying %q", name, err, c.says)
		}
	}
	// Not zstd at all.
	if _, _, err := decodeAll([]byte("plain text, not zstd")); !errors.Is(err, ErrDamaged) {
		t.Errorf("not zstd: %v", err)
	}
}

// A log larger than the spool's memory goes through a temporary file and
// comes back whole.
func TestSpoolSpillsToAFile(t *testing.T) {
	sp := newSpool()
	defer sp.Close()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for range 6 {
		if _, err := sp.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if sp.f == nil {
		t.Fatal("6 MiB stayed in memory")
	}
	r, err := sp.Reader()
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(r)
	if len(all) != 6*len(chunk) || sp.Size() != int64(len(all)) || !bytes.Equal(all[len(all)-len(chunk):], chunk) {
		t.Fatalf("read back %d bytes (size %d), want %d", len(all), sp.Size(), 6*len(chunk))
	}
}
