package executor

import (
	"bytes"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TestLogWriterChunks checks the writer's own contract without an engine:
// chunks never exceed MaxChunk, offsets are contiguous, small writes are
// coalesced, and Close flushes the rest and stops everything after it.
func TestLogWriterChunks(t *testing.T) {
	var chunks []*podiumv1.LogChunk
	w := newLogWriter(podiumv1.LogStream_LOG_STREAM_STDOUT, func(c *podiumv1.LogChunk) { chunks = append(chunks, c) })

	big := bytes.Repeat([]byte{0xff, 0x00, 'x'}, MaxChunk) // 3 chunks' worth
	for i := 0; i < 100; i++ {
		if _, err := w.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := w.Write([]byte("late")); err == nil {
		t.Fatal("write after Close succeeded")
	}
	time.Sleep(2 * chunkLinger) // a stray timer must not emit anything now

	var all bytes.Buffer
	for _, c := range chunks {
		if c.GetOffset() != uint64(all.Len()) {
			t.Fatalf("chunk at %d, want %d", c.GetOffset(), all.Len())
		}
		if len(c.GetData()) == 0 || len(c.GetData()) > MaxChunk {
			t.Fatalf("chunk of %d bytes", len(c.GetData()))
		}
		all.Write(c.GetData())
	}
	want := append(bytes.Repeat([]byte("a"), 100), big...)
	if !bytes.Equal(all.Bytes(), want) {
		t.Fatalf("reassembled %d bytes, want %d identical bytes", all.Len(), len(want))
	}
	if len(chunks) != 4 {
		t.Fatalf("%d chunks, want 4 (the 100 one-byte writes coalesced into the first)", len(chunks))
	}
}
