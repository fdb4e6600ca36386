package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/redact"
	"github.com/podiumhq/podium/agent/runlog"
	"github.com/podiumhq/podium/agent/taskfile"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// How often a tail looks for more of a runner log. It looks again at once
// while there is output, then backs off to maxPoll while there is none; each
// look that finds nothing ends the chunk being gathered, so a task that
// prints steadily has its output coalesced into chunks of about minPoll's
// worth, and one that prints a line now and then has each line sent within
// maxPoll.
const (
	minPoll = 10 * time.Millisecond
	maxPoll = 200 * time.Millisecond
)

// maxNoteLine bounds one line of a sidecar's output shown as a note.
const maxNoteLine = 4 << 10

// tail follows one runner log in a goroutine of the run.
type tail struct {
	finishC    chan struct{}
	finishOnce sync.Once
	done       chan struct{}
	exit       *runlog.Exit
	err        error
}

// finish tells the tail that the container has exited: it reads what is left
// and stops.
func (t *tail) finish() { t.finishOnce.Do(func() { close(t.finishC) }) }

// wait waits for the tail to stop and returns the exit record it found, if
// any, and the error that stopped it early, if any.
func (t *tail) wait() (*runlog.Exit, error) {
	<-t.done
	return t.exit, t.err
}

// sink turns records into events. after is where the reader stands once rec
// is consumed. flush is called whenever the reader has caught up with the
// log, close once when the log is read to its end.
type sink interface {
	add(rec runlog.Record, after runlog.Position)
	flush()
	close()
}

func (r *run) startTaskTail(ctx context.Context) *tail {
	r.emitMu.Lock()
	from := r.cur.Task
	r.emitMu.Unlock()
	return r.startTail(ctx, filepath.Join(r.dir, logFile), filepath.Join(r.dir, progressFile), from, &chunker{r: r})
}

func (r *run) startSidecarTail(ctx context.Context, name string) {
	r.emitMu.Lock()
	from := r.cur.Sidecars[name]
	r.emitMu.Unlock()
	if r.sidecarTails == nil {
		r.sidecarTails = make(map[string]*tail)
	}
	r.sidecarTails[name] = r.startTail(ctx, r.sidecarLog(name), r.sidecarProgress(name), from, &lineNotes{r: r, name: name, last: from})
}

// stopSidecarTails lets the sidecars' tails read what is left and waits for
// them.
func (r *run) stopSidecarTails(ctx context.Context) {
	for _, t := range r.sidecarTails {
		t.finish()
	}
	for name, t := range r.sidecarTails {
		if _, err := t.wait(); err != nil && ctx.Err() == nil {
			r.log.Warn("reading a sidecar's runner log failed", "sidecar", name, "err", err)
		}
	}
	r.sidecarTails = nil
}

// startTail follows the runner log at path, telling its runner how far it
// has read through the progress file at progressPath.
func (r *run) startTail(ctx context.Context, path, progressPath string, from runlog.Position, s sink) *tail {
	t := &tail{finishC: make(chan struct{}), done: make(chan struct{})}
	var pw *runlog.ProgressWriter
	if _, err := os.Lstat(progressPath); err == nil {
		if pw, err = runlog.OpenProgress(progressPath); err != nil {
			// The runner then holds the task back at its backlog until
			// the task ends; say why.
			r.log.Warn("cannot open a runner log's progress file; its task's output is held back once its backlog is full",
				"file", progressPath, "err", err)
		}
	} // else a container an older agent started, whose runner reads none
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer close(t.done)
		if pw != nil {
			defer pw.Close()
		}
		// Nothing of an attempt with secrets is read before they can be
		// redacted (see awaitSecrets).
		if err := r.awaitSecrets(ctx); err != nil {
			t.err = err
			return
		}
		t.exit, t.err = follow(ctx, path, from, s, t.finishC, &progress{w: pw, every: r.e.backlog / 4, log: r.log})
	}()
	return t
}

// progress tells a runner how far its log has been read: whenever the tail
// has caught up with the log, and in between every quarter of the backlog,
// so a runner held back resumes long before the tail catches up.
type progress struct {
	w     *runlog.ProgressWriter
	every int64
	told  int64
	log   *slog.Logger
	err   bool
}

func (p *progress) at(pos int64, caughtUp bool) {
	if p.w == nil || pos <= p.told || !caughtUp && pos-p.told < p.every {
		return
	}
	if err := p.w.Set(pos); err != nil {
		if !p.err {
			p.err = true
			p.log.Warn("cannot write a runner log's progress file; its task's output may be held back", "err", err)
		}
		return
	}
	p.told = pos
}

// follow reads the runner log at path from a position until its exit record,
// until the log ends after finishC is closed, or until ctx ends (the agent is
// stopping: what was not turned into events yet stays in the file for the
// next agent process).
func follow(ctx context.Context, path string, from runlog.Position, s sink, finishC <-chan struct{}, pr *progress) (*runlog.Exit, error) {
	f, err := openRunnerLog(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := runlog.NewReader(f, from)
	if err != nil {
		return nil, err
	}
	poll := minPoll
	finishing := false
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			s.flush()
			pr.at(rd.Position().File, true)
			if finishing {
				s.close()
				return nil, nil
			}
			t := time.NewTimer(poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-finishC:
				t.Stop()
				finishing, finishC = true, nil
			case <-t.C:
				poll = min(poll*2, maxPoll)
			}
			continue
		}
		if err != nil {
			s.flush()
			return nil, err
		}
		poll = minPoll
		if rec.Exit != nil {
			s.flush()
			s.close()
			return rec.Exit, nil
		}
		s.add(rec, rd.Position())
		pr.at(rd.Position().File, false)
	}
}

// openRunnerLog opens a runner log for reading. Its path is the agent's (the
// attempt's directory, which no container mounts), but the file is
// bind-mounted into a container whose runner, and whatever runs as root
// beside it, writes it: it is opened the way every file a task can write is
// (package taskfile), a regular file or nothing.
func openRunnerLog(path string) (*os.File, error) {
	return taskfile.Open(filepath.Dir(path), filepath.Base(path))
}

// chunker gathers consecutive records of one stream into LogChunk events of
// at most MaxChunk bytes. A chunk ends at a record's end whenever it can, so
// the cursor stored with it is a plain file position.
//
// Each stream's bytes pass through the run's redactor (package redact)
// before they become a chunk, the one place a task's output becomes events.
// The redactor holds back the end of a stream while it could be the start
// of a secret; the cursor stored with a chunk then stops before the bytes
// held back (at the record they start in, with the stream's consumed count
// just before them), so an agent that restarts reads them again instead of
// losing them. LogChunk.Offset is the position in the task's raw stream of
// the first byte the chunk stands for; a redacted chunk's data is not as
// long as the raw bytes it stands for.
//
// It also keeps the attempt to its output limit: a chunk that would cross
// the limit is cut at it, and from then on records are read past without a
// chunk (the cursor still moves over them, so that a restarted agent does not
// read them again). Output withheld (see withholdLocked) is read past the
// same way.
type chunker struct {
	r      *run
	stream runlog.Stream
	off    uint64 // stream offset of buf[0]
	buf    []byte
	end    runlog.Position // where the reader stands after buf
	// moved is set while end is past what the cursor says, with nothing
	// in buf: output read past once the limit was reached.
	moved bool
	// starts are the records whose data is in buf: their file position
	// and the stream offset of their first byte in buf.
	starts []recordStart
	// red is each stream's redaction (by runlog.Stream), made when the
	// run has a redactor; heldFile is the file position of the record the
	// first byte it holds back is in.
	red      [3]*redact.Stream
	heldFile [3]int64
}

type recordStart struct {
	file int64
	off  uint64
}

func (c *chunker) dropping() bool { return c.r.capped.Load() || c.r.withhold.Load() }

func (c *chunker) add(rec runlog.Record, after runlog.Position) {
	if c.dropping() {
		// buf, if it holds anything, is dropped by flush too.
		c.end, c.moved = after, true
		return
	}
	if len(c.buf) > 0 && (rec.Stream != c.stream || rec.Offset != c.off+uint64(len(c.buf)) || len(c.buf)+len(rec.Data) > MaxChunk) {
		c.flush()
	}
	data := rec.Data
	for len(data) > 0 {
		if len(c.buf) == 0 {
			c.stream = rec.Stream
			c.off = rec.Offset + uint64(len(rec.Data)-len(data))
		}
		c.starts = append(c.starts, recordStart{file: rec.Start, off: rec.Offset + uint64(len(rec.Data)-len(data))})
		n := min(len(data), MaxChunk-len(c.buf))
		c.buf = append(c.buf, data[:n]...)
		data = data[n:]
		if len(data) > 0 {
			// A record bigger than a chunk (not one the runner writes):
			// this chunk ends inside it.
			pos := after
			pos.File = rec.Start
			c.end = pos.WithConsumed(rec.Stream, c.off+uint64(len(c.buf)))
			c.flush()
		}
	}
	c.end = after
}

func (c *chunker) flush() { c.emit(false) }

// close hands on what the redaction still holds back too: the stream has
// ended.
func (c *chunker) close() { c.emit(true) }

// piece is output ready to become chunks.
type piece struct {
	stream runlog.Stream
	off    uint64
	data   []byte
}

func (c *chunker) held() bool {
	for _, s := range c.red {
		if s != nil && s.Held() > 0 {
			return true
		}
	}
	return false
}

func (c *chunker) redaction(s runlog.Stream) *redact.Stream {
	if c.red[s] == nil && c.r.redactor != nil {
		c.red[s] = c.r.redactor.Stream()
	}
	return c.red[s]
}

func (c *chunker) emit(final bool) {
	if len(c.buf) == 0 && !c.moved && !(final && c.held()) {
		return
	}
	r := c.r
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	defer func() { c.buf, c.moved, c.starts = c.buf[:0], false, c.starts[:0] }()
	if c.dropping() {
		// What is held back is dropped with the rest.
		c.red = [3]*redact.Stream{}
		r.cur.Task = c.end
		return
	}
	var pieces []piece
	if len(c.buf) > 0 {
		if st := c.redaction(c.stream); st == nil {
			pieces = append(pieces, piece{c.stream, c.off, c.buf})
		} else {
			before := st.Held()
			out := st.Write(nil, c.buf)
			if held := st.Held(); held > 0 && held <= len(c.buf) {
				first := c.off + uint64(len(c.buf)-held)
				for _, s := range c.starts {
					if s.off <= first {
						c.heldFile[c.stream] = s.file
					}
				}
			}
			pieces = append(pieces, piece{c.stream, c.off - uint64(before), out})
		}
	}
	cur := c.end
	for _, s := range []runlog.Stream{runlog.Stdout, runlog.Stderr} {
		st := c.red[s]
		if st == nil || st.Held() == 0 {
			continue
		}
		held := uint64(st.Held())
		consumed := cur.Stdout
		if s == runlog.Stderr {
			consumed = cur.Stderr
		}
		if final {
			pieces = append(pieces, piece{s, consumed - held, st.Flush(nil)})
			continue
		}
		cur = cur.WithConsumed(s, consumed-held)
		cur.File = min(cur.File, c.heldFile[s])
	}
	r.cur.Task = cur
	// Each piece goes out in chunks of at most MaxChunk; only the last
	// carries the cursor, so a restart between them repeats output
	// rather than skip it.
	type out struct {
		stream runlog.Stream
		off    uint64
		data   []byte
	}
	var outs []out
	for _, p := range pieces {
		for len(p.data) > 0 {
			n := min(len(p.data), MaxChunk)
			outs = append(outs, out{p.stream, p.off, p.data[:n]})
			p.data = p.data[n:]
		}
	}
	for i, o := range outs {
		n := r.roomLocked(len(o.data))
		if n > 0 {
			stream := podiumv1.LogStream_LOG_STREAM_STDOUT
			if o.stream == runlog.Stderr {
				stream = podiumv1.LogStream_LOG_STREAM_STDERR
			}
			r.cur.Output += uint64(n)
			var cur *attempt.Cursor
			if i == len(outs)-1 || n < len(o.data) {
				cur = r.cur.Clone()
			}
			r.emitLocked(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{
				Stream: stream, Offset: o.off, Data: bytes.Clone(o.data[:n]),
			}}}, cur)
		}
		if n < len(o.data) {
			r.capLocked(true)
			c.red = [3]*redact.Stream{}
			return
		}
	}
}

// lineNotes turns a sidecar's output into one Note per line, "[name] line":
// a person reading `podium logs` sees the sidecar's output among Podium's own
// "→" lines, marked with whose it is, while the task's stdout and stderr stay
// byte-exact and only the task's. Each note carries the cursor just past its
// line, so a restart neither repeats nor skips a line.
//
// The lines are kept to the sidecar's line budget (see noteRate); those over
// it are counted, and the count is noted before the next line shown, or at
// the end. Each note counts against the attempt's output limit.
type lineNotes struct {
	r      *run
	name   string
	budget lineBudget
	// skipped counts the lines left out since the last note.
	skipped int

	// With secrets to redact, the sidecar's output passes through red
	// before it is cut into lines (see addRedacted). last is the cursor
	// of everything shown so far, end where the reader stands, heldFile
	// the record the first byte red holds back is in.
	red      *redact.Stream
	last     runlog.Position
	end      runlog.Position
	heldFile int64
}

func (l *lineNotes) add(rec runlog.Record, after runlog.Position) {
	if l.r.redactor != nil {
		l.addRedacted(rec, after)
		return
	}
	data := rec.Data
	consumed := rec.Offset
	capped := l.r.capped.Load() || l.r.withhold.Load()
	now := time.Now()
	for len(data) > 0 && !capped {
		if !l.budget.left(now) {
			// Out of budget for the rest of the record: count its lines
			// at memchr's speed rather than look at each, so a sidecar
			// printing without pause costs the agent little.
			l.skipped += bytes.Count(data, []byte{'\n'})
			if data[len(data)-1] != '\n' {
				l.skipped++
			}
			break
		}
		n, adv := len(data), len(data)
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			n, adv = i, i+1
		}
		if n > maxNoteLine {
			n, adv = maxNoteLine, maxNoteLine
		}
		raw := data[:n]
		data = data[adv:]
		start := consumed
		consumed += uint64(adv)
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		l.budget.take()
		before, pos := after, after
		before.File = rec.Start
		before = before.WithConsumed(rec.Stream, start)
		if len(data) > 0 {
			pos.File = rec.Start
			pos = pos.WithConsumed(rec.Stream, consumed)
		}
		capped = l.emit(string(bytes.TrimRight(raw, "\r")), before, pos)
	}
	// Whatever was not shown is passed over: the cursor moves past it.
	r := l.r
	r.emitMu.Lock()
	l.moveLocked(after)
	r.emitMu.Unlock()
}

func (l *lineNotes) flush() {}

// addRedacted is add for a sidecar whose output may hold secrets: the
// output is redacted as a stream, across records, before it is cut into
// lines, so a secret split over two writes is caught too. The redacted
// lines do not map onto the log's bytes, so each record's lines carry the
// cursor from before the record but the last, which carries the one past
// it (less what the redaction holds back): a restart between them shows a
// line again rather than lose one.
func (l *lineNotes) addRedacted(rec runlog.Record, after runlog.Position) {
	if l.red == nil {
		l.red = l.r.redactor.Stream()
	}
	l.end = after
	data := l.red.Write(nil, rec.Data)
	pos := after
	if held := l.red.Held(); held > 0 {
		if held <= len(rec.Data) {
			l.heldFile = rec.Start
		}
		consumed := after.Stdout
		if rec.Stream == runlog.Stderr {
			consumed = after.Stderr
		}
		pos = after.WithConsumed(rec.Stream, consumed-uint64(held))
		pos.File = min(pos.File, l.heldFile)
	}
	l.showLines(data, pos)
}

// showLines notes the lines of redacted output; the last carries pos, the
// others the cursor before them.
func (l *lineNotes) showLines(data []byte, pos runlog.Position) {
	r := l.r
	var lines [][]byte
	now := time.Now()
	for len(data) > 0 && !r.capped.Load() && !r.withhold.Load() {
		if !l.budget.left(now) {
			l.skipped += bytes.Count(data, []byte{'\n'})
			if data[len(data)-1] != '\n' {
				l.skipped++
			}
			break
		}
		n, adv := len(data), len(data)
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			n, adv = i, i+1
		}
		if n > maxNoteLine {
			n, adv = maxNoteLine, maxNoteLine
		}
		line := data[:n]
		data = data[adv:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		l.budget.take()
		lines = append(lines, line)
	}
	for i, line := range lines {
		at := l.last
		if i == len(lines)-1 {
			at = pos
		}
		if l.emit(string(bytes.TrimRight(line, "\r")), l.last, at) {
			break
		}
	}
	r.emitMu.Lock()
	l.moveLocked(pos)
	r.emitMu.Unlock()
	l.last = pos
}

// close notes what the redaction still holds back, and the lines skipped
// since the last note shown.
func (l *lineNotes) close() {
	if l.red != nil && l.red.Held() > 0 {
		l.showLines(l.red.Flush(nil), l.end)
	}
	if l.skipped == 0 {
		return
	}
	r := l.r
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	l.skippedLocked()
}

func (l *lineNotes) moveLocked(pos runlog.Position) {
	r := l.r
	if r.cur.Sidecars == nil {
		r.cur.Sidecars = make(map[string]runlog.Position)
	}
	r.cur.Sidecars[l.name] = pos
}

func (l *lineNotes) skippedLocked() {
	if l.skipped == 0 || l.r.cur.Capped {
		return
	}
	n := l.skipped
	l.skipped = 0
	l.r.countedNoteLocked(fmt.Sprintf("[%s] … %d lines skipped: a sidecar's output is shown at up to %d lines a second", l.name, n, noteRate), true)
}

// emit notes one line, after the count of the lines skipped before it;
// before and pos are where the line starts and ends. It reports whether the
// attempt's output limit is reached.
func (l *lineNotes) emit(line string, before, pos runlog.Position) bool {
	r := l.r
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	if l.skipped > 0 {
		l.moveLocked(before)
		l.skippedLocked()
	}
	l.moveLocked(pos)
	r.countedNoteLocked("["+l.name+"] "+line, true)
	return r.cur.Capped
}

// lastLines is the end of a sidecar's output, for the reason of a task whose
// sidecar never became ready: the line that says why is almost always among
// the last few.
func lastLines(path, name string, n int) string {
	f, err := openRunnerLog(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	rd, err := runlog.NewReader(f, runlog.Position{})
	if err != nil {
		return ""
	}
	const keep = 16 << 10
	var tailBuf []byte
	for {
		rec, err := rd.Next()
		if err != nil || rec.Exit != nil {
			break
		}
		tailBuf = append(tailBuf, rec.Data...)
		if len(tailBuf) > 2*keep {
			tailBuf = append(tailBuf[:0], tailBuf[len(tailBuf)-keep:]...)
		}
	}
	lines := strings.Split(strings.TrimRight(string(tailBuf), "\n"), "\n")
	var out []string
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		l := strings.TrimRight(lines[i], "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		out = append(out, "["+name+"] "+strings.ToValidUTF8(l, "\uFFFD"))
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return strings.Join(out, "\n")
}
