package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// tailBuffer keeps the last lines written to it through its two writers,
// stdout and stderr in the order they came, for podium logs --tail: it holds
// no more than the lines asked for, one segment more, and at most
// tailMaxBytes, however long the log.
type tailBuffer struct {
	n     int
	segs  []tailSeg
	lines int // newlines in segs
	bytes int
}

type tailSeg struct {
	stderr bool
	data   []byte
}

// tailMaxBytes bounds what --tail keeps: a log with few newlines (binary
// output, a progress bar) must not be held whole in memory.
const tailMaxBytes = 16 << 20

type tailWriter struct {
	b      *tailBuffer
	stderr bool
}

func (w tailWriter) Write(p []byte) (int, error) {
	w.b.add(w.stderr, p)
	return len(p), nil
}

func (b *tailBuffer) stdout() io.Writer { return tailWriter{b, false} }
func (b *tailBuffer) stderr() io.Writer { return tailWriter{b, true} }

func (b *tailBuffer) add(stderr bool, p []byte) {
	if len(p) == 0 {
		return
	}
	b.segs = append(b.segs, tailSeg{stderr, append([]byte(nil), p...)})
	b.lines += countNewlines(p)
	b.bytes += len(p)
	// The first segment goes once the rest holds more than n whole lines:
	// the last n lines, whole or not, lie in the rest.
	for len(b.segs) > 1 && b.lines-countNewlines(b.segs[0].data) > b.n {
		b.lines -= countNewlines(b.segs[0].data)
		b.bytes -= len(b.segs[0].data)
		b.segs = b.segs[1:]
	}
	for b.bytes > tailMaxBytes {
		cut := min(len(b.segs[0].data), b.bytes-tailMaxBytes)
		b.lines -= countNewlines(b.segs[0].data[:cut])
		b.bytes -= cut
		if b.segs[0].data = b.segs[0].data[cut:]; len(b.segs[0].data) == 0 {
			b.segs = b.segs[1:]
		}
	}
}

func countNewlines(p []byte) int { return bytes.Count(p, newline) }

var newline = []byte{'\n'}

// writeTo writes the last n lines, each to the stream it came from, and
// reports whether stderr was left in the middle of a line.
func (b *tailBuffer) writeTo(stdout, stderr io.Writer) (stderrMidLine bool, err error) {
	// Walk back from the end to the start of the n-th line from the end:
	// the newline that ends the last line does not start another one.
	seg, off := 0, 0
	if b.n == 0 {
		seg = len(b.segs)
	} else {
		found := 0
		last := true
	walk:
		for i := len(b.segs) - 1; i >= 0; i-- {
			d := b.segs[i].data
			for j := len(d) - 1; j >= 0; j-- {
				if d[j] == '\n' && !last {
					if found++; found == b.n {
						seg, off = i, j+1
						break walk
					}
				}
				last = false
			}
		}
	}
	for i := seg; i < len(b.segs); i++ {
		s := b.segs[i]
		d := s.data
		if i == seg {
			d = d[off:]
		}
		if len(d) == 0 {
			continue
		}
		w := stdout
		if s.stderr {
			w = stderr
			stderrMidLine = d[len(d)-1] != '\n'
		}
		if _, err := w.Write(d); err != nil {
			return stderrMidLine, err
		}
	}
	return stderrMidLine, nil
}

// parseTail reads --tail: "all" (-1) or a number of lines, 0 or more.
func parseTail(s string) (int, error) {
	if s == "all" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--tail %q: give a number of lines, 0 or more, or all", s)
	}
	return n, nil
}
