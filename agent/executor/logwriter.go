package executor

import (
	"errors"
	"sync"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// MaxChunk is the most output bytes one LogChunk event carries. It keeps every
// event far below any message-size limit on the way to the coordinator, and a
// chunk is the unit the coordinator stores, so it also bounds a row.
const MaxChunk = 32 << 10

// chunkLinger is how long output may wait for more output before it is sent as
// a chunk. A task printing one short line at a time would otherwise become one
// event, one batch entry and one stored row per line; lingering this long
// coalesces a burst of lines without a person watching the log noticing.
const chunkLinger = 20 * time.Millisecond

var errWriterClosed = errors.New("executor: output written after the task's log was closed")

// logWriter turns one output stream of a container into LogChunk events.
//
// Each chunk carries the offset of its first byte within the stream, counted
// from the first byte the container wrote, so a reader that resumes after a
// reconnect knows exactly where it is. Offsets are contiguous by construction:
// nothing is ever dropped between two chunks of one writer.
type logWriter struct {
	stream podiumv1.LogStream
	emit   func(*podiumv1.LogChunk)

	mu     sync.Mutex
	buf    []byte
	offset uint64 // offset of buf[0]
	timer  *time.Timer
	closed bool
}

func newLogWriter(stream podiumv1.LogStream, emit func(*podiumv1.LogChunk)) *logWriter {
	return &logWriter{stream: stream, emit: emit}
}

// Write buffers p and emits every full chunk at once; what is left goes out
// after chunkLinger unless more output fills it first. It never fails: the
// bytes are the task's and must not be refused.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		// Output after Close would land behind the terminal status. The run
		// waits for its copier before closing, so this only guards against a
		// future bug; failing the write stops the copier instead of
		// reordering the task's log.
		return 0, errWriterClosed
	}
	n := len(p)
	for len(p) > 0 {
		take := min(MaxChunk-len(w.buf), len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == MaxChunk {
			w.flushLocked()
		}
	}
	if len(w.buf) > 0 && w.timer == nil {
		w.timer = time.AfterFunc(chunkLinger, w.flushTimer)
	}
	return n, nil
}

func (w *logWriter) flushTimer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	if !w.closed {
		w.flushLocked()
	}
}

// flushLocked emits what is buffered as one chunk. The chunk gets its own copy
// of the bytes because the buffer is reused for the next one.
func (w *logWriter) flushLocked() {
	if len(w.buf) == 0 {
		return
	}
	data := make([]byte, len(w.buf))
	copy(data, w.buf)
	w.emit(&podiumv1.LogChunk{Stream: w.stream, Offset: w.offset, Data: data})
	w.offset += uint64(len(data))
	w.buf = w.buf[:0]
}

// Close emits whatever is still buffered and stops the linger timer. After it
// returns no further chunk is emitted, which is what lets the run put the
// terminal status strictly after the last byte of output.
func (w *logWriter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.flushLocked()
	w.closed = true
}

// Len is how many bytes the stream has produced so far.
func (w *logWriter) Len() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offset + uint64(len(w.buf))
}
