package console

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"strings"

	terminal "github.com/buildkite/terminal-to-html/v3"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/statusline"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A task's log is stored as chunks of its output (stdout and stderr, as the
// agent read them) and podium's notes and state changes, in one order. The
// console shows it as numbered lines: each stream's bytes are cut at its
// newlines (a line may span chunks; the two streams' partial lines are kept
// apart, so interleaved output does not mix mid-line), and each note or
// state change is a line of its own. Line numbers are a property of the
// stored log, the same on every read, so #L123 always names the same line.

// maxLineBytes cuts a line without newlines (a progress bar, a minified
// file) into lines of at most this many bytes, so no one line can make a
// page, or the browser rendering it, arbitrarily large.
const maxLineBytes = 8 << 10

// PageLines is the most lines one page of a log shows: the task page shows
// the last PageLines lines, and earlier ones a page at a time.
const PageLines = 1000

// logLine is one line of a log.
type logLine struct {
	N int64
	// Stream is stdout, stderr or note.
	Stream string
	Text   []byte
}

// HTML renders the line's text: ANSI colours and styles become classes
// (terminal-to-html), and everything else is escaped.
func (l logLine) HTML() template.HTML {
	if bytes.IndexByte(l.Text, 0x1b) < 0 && bytes.IndexByte(l.Text, '\r') < 0 && bytes.IndexByte(l.Text, '\b') < 0 {
		return template.HTML(template.HTMLEscapeString(strings.ToValidUTF8(string(l.Text), "\uFFFD"))) //nolint:gosec // escaped
	}
	s, err := terminal.NewScreen()
	if err != nil {
		return template.HTML(template.HTMLEscapeString(string(l.Text))) //nolint:gosec // escaped
	}
	_, _ = s.Write(l.Text)
	// terminal-to-html escapes the text it renders; a cursor movement can
	// make a second screen line, which stays inside this line.
	return template.HTML(strings.ReplaceAll(s.AsHTMLWithTimestamps(false), "\n", " ")) //nolint:gosec // rendered and escaped by terminal-to-html
}

// errStop ends a read of the log early, once the lines wanted are in.
var errStop = errors.New("enough lines")

// lineScanner turns a log's events into numbered lines.
type lineScanner struct {
	next int64     // the next line's number, from 1
	pend [2][]byte // each stream's partial line
	emit func(logLine) error
}

func newLineScanner(emit func(logLine) error) *lineScanner {
	return &lineScanner{next: 1, emit: emit}
}

func (s *lineScanner) line(stream string, text []byte) error {
	l := logLine{N: s.next, Stream: stream, Text: text}
	s.next++
	return s.emit(l)
}

var streamNames = [2]string{"stdout", "stderr"}

// event takes the log's next event.
func (s *lineScanner) event(ev *podiumv1.TaskEvent) error {
	switch b := ev.GetBody().(type) {
	case *podiumv1.TaskEvent_Log:
		i := 0
		if b.Log.GetStream() == podiumv1.LogStream_LOG_STREAM_STDERR {
			i = 1
		}
		data := b.Log.GetData()
		for len(data) > 0 {
			nl := bytes.IndexByte(data, '\n')
			if nl < 0 {
				room := maxLineBytes - len(s.pend[i])
				if len(data) < room {
					s.pend[i] = append(s.pend[i], data...)
					return nil
				}
				nl = room
				text := append(s.pend[i], data[:nl]...)
				s.pend[i] = nil
				data = data[nl:]
				if err := s.line(streamNames[i], text); err != nil {
					return err
				}
				continue
			}
			text := append(s.pend[i], data[:nl]...)
			s.pend[i] = nil
			data = data[nl+1:]
			for len(text) > maxLineBytes {
				if err := s.line(streamNames[i], text[:maxLineBytes:maxLineBytes]); err != nil {
					return err
				}
				text = text[maxLineBytes:]
			}
			if err := s.line(streamNames[i], bytes.Clone(text)); err != nil {
				return err
			}
		}
	case *podiumv1.TaskEvent_Note:
		return s.note(b.Note.GetText())
	case *podiumv1.TaskEvent_Status:
		st := b.Status
		// Worded as podium run and podium logs word it.
		return s.note(statusline.Line(st.GetState(), st.GetReason(), st.ExitCode, st.GetSignal(), ""))
	}
	return nil
}

func (s *lineScanner) note(text string) error {
	text = strings.TrimRight(text, "\n")
	for i, part := range strings.Split(text, "\n") {
		prefix := "→ "
		if i > 0 {
			prefix = "  "
		}
		if err := s.line("note", []byte(prefix+part)); err != nil {
			return err
		}
	}
	return nil
}

// flush ends the streams' partial lines: the log has ended.
func (s *lineScanner) flush() error {
	for i := range s.pend {
		if len(s.pend[i]) > 0 {
			text := s.pend[i]
			s.pend[i] = nil
			if err := s.line(streamNames[i], text); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanLog reads t's whole log (or until emit returns errStop) into lines,
// through the one reader of logs (logarchive.Reader.ReadLog) the API uses
// too.
// The partial lines at the end are ended only once the task has ended:
// while it runs they may yet go on.
func (c *Console) scanLog(ctx context.Context, t store.Task, emit func(logLine) error) (store.Task, error) {
	sc := newLineScanner(emit)
	var after int64
	t, err := c.archive.ReadLog(ctx, t, &after, func(_ int64, ev *podiumv1.TaskEvent) error { return sc.event(ev) })
	if err == nil && store.Terminal(t.State) {
		err = sc.flush()
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	return t, err
}

// pageLines is a page of a log: lines from..from+limit-1, or with from 0
// the last limit lines. total is how many lines the log has (so far), read
// to its end for the tail; a page before the tail stops reading at the
// line after it, which total then is.
func (c *Console) pageLines(ctx context.Context, t store.Task, from int64, limit int) (lines []logLine, total int64, err error) {
	var n int64
	// The tail is kept in a ring of limit lines: a log of millions of
	// lines costs one slot's write per line.
	var ring []logLine
	emit := func(l logLine) error {
		n = l.N
		switch {
		case from == 0:
			if len(ring) < limit {
				ring = append(ring, l)
			} else {
				ring[(l.N-1)%int64(limit)] = l
			}
		case l.N >= from && l.N < from+int64(limit):
			lines = append(lines, l)
		case l.N >= from+int64(limit):
			return errStop
		}
		return nil
	}
	_, err = c.scanLog(ctx, t, emit)
	if from == 0 && len(ring) > 0 {
		// The oldest line kept is in the slot after the newest.
		start := int(n % int64(limit))
		if len(ring) < limit {
			start = 0
		}
		lines = append(ring[start:len(ring):len(ring)], ring[:start]...)
	}
	// A page that stopped early knows only that the log goes on past it:
	// total is then its last line and one.
	return lines, n, err
}
