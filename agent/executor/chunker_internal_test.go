package executor

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/redact"
	"github.com/podiumhq/podium/agent/runlog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// chunkerRun is a run with just what a chunker uses, recording the chunks it
// emits per stream and the newest cursor.
func chunkerRun(red *redact.Redactor, cur attempt.Cursor, out map[podiumv1.LogStream]*[]byte, last *attempt.Cursor) *run {
	r := &run{outputLimit: 1 << 30, log: slog.New(slog.NewTextHandler(io.Discard, nil)), redactor: red, cur: cur}
	r.emitFn = func(ev *podiumv1.TaskEvent, c *attempt.Cursor) {
		if l := ev.GetLog(); l != nil {
			b := out[l.GetStream()]
			*b = append(*b, l.GetData()...)
		}
		if c != nil {
			*last = *c
		}
	}
	return r
}

// TestChunkerCursorStopsBeforeWhatRedactionHolds: a runner log with stdout
// and stderr interleaved and a secret split over records of both; an agent
// that stops after any number of records (having emitted what it could,
// with its cursor) and a next one that resumes from that cursor to the end
// send, together, each stream exactly as redacting it whole gives: nothing
// held back at the stop is lost, and nothing is sent twice.
func TestChunkerCursorStopsBeforeWhatRedactionHolds(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-VALUE-42"
	red := redact.New([]redact.Secret{{Name: "pw", Value: []byte(secret)}})
	writes := []struct {
		s runlog.Stream
		d string
	}{
		{runlog.Stdout, "a s3c"}, {runlog.Stderr, "err s3cr3t-V"}, {runlog.Stdout, "r3t-VAL"},
		{runlog.Stderr, "ALUE-42 e"}, {runlog.Stdout, "UE-42 b\n"}, {runlog.Stdout, "s3cr3t"},
		{runlog.Stderr, "s"}, {runlog.Stdout, "-VALUE-4"}, {runlog.Stdout, "2"}, {runlog.Stderr, "3cr3t"},
	}
	path := filepath.Join(t.TempDir(), "output.log")
	w, err := runlog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := map[runlog.Stream]string{}
	for _, wr := range writes {
		if err := w.Write(wr.s, []byte(wr.d)); err != nil {
			t.Fatal(err)
		}
		whole[wr.s] += wr.d
	}
	_ = w.Close()
	want := map[podiumv1.LogStream]string{
		podiumv1.LogStream_LOG_STREAM_STDOUT: red.String(whole[runlog.Stdout]),
		podiumv1.LogStream_LOG_STREAM_STDERR: red.String(whole[runlog.Stderr]),
	}
	if want[podiumv1.LogStream_LOG_STREAM_STDOUT] != "a [redacted:pw] b\n[redacted:pw]" {
		t.Fatalf("the case is not what it means to be: %q", want[podiumv1.LogStream_LOG_STREAM_STDOUT])
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for stopAt := 0; stopAt <= len(writes); stopAt++ {
		var so, se []byte
		out := map[podiumv1.LogStream]*[]byte{podiumv1.LogStream_LOG_STREAM_STDOUT: &so, podiumv1.LogStream_LOG_STREAM_STDERR: &se}
		var cur attempt.Cursor
		// The first agent reads stopAt records, flushing after each (as
		// it does whenever it has caught up), and stops.
		r1 := chunkerRun(red, attempt.Cursor{}, out, &cur)
		c1 := &chunker{r: r1}
		rd, _ := runlog.NewReader(f, runlog.Position{})
		for range stopAt {
			rec, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			c1.add(rec, rd.Position())
			c1.flush()
		}
		// cur is what it stored with its last event: where a restart
		// resumes.
		// The next agent resumes from there and reads to the end.
		r2 := chunkerRun(red, cur, out, &cur)
		c2 := &chunker{r: r2}
		rd, _ = runlog.NewReader(f, cur.Task)
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			c2.add(rec, rd.Position())
		}
		c2.close()
		for s, b := range out {
			if string(*b) != want[s] {
				t.Fatalf("stopped after %d records: %s %q, want %q", stopAt, s, *b, want[s])
			}
		}
	}
}

// TestSidecarNotesResumeRedacted is the same for a sidecar's lines: an agent
// stopping after any record and the next resuming from the cursor stored
// with the last note show every line's text once, and no piece of the
// secret, though it is split over records.
func TestSidecarNotesResumeRedacted(t *testing.T) {
	t.Parallel()
	red := redact.New([]redact.Secret{{Name: "pw", Value: []byte("QQQQQQQQQQ")}})
	writes := []string{"one QQQ", "QQQQ", "QQQ two\nthree\nfourQ", "QQQQQQQQQ", " five\nQQQQQ", "QQ", "QQQ", "\nsix\n"}
	path := filepath.Join(t.TempDir(), "db.log")
	w, err := runlog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range writes {
		if err := w.Write(runlog.Stdout, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	_ = w.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	squash := func(s string) string {
		s = strings.ReplaceAll(s, "[db] ", "")
		s = strings.ReplaceAll(s, "[redacted:pw]", "")
		return strings.Join(strings.Fields(s), "")
	}
	for stopAt := 0; stopAt <= len(writes); stopAt++ {
		var notes []string
		var cur attempt.Cursor
		mk := func(from attempt.Cursor) *run {
			r := &run{outputLimit: 1 << 30, log: slog.New(slog.NewTextHandler(io.Discard, nil)), redactor: red, cur: from}
			r.emitFn = func(ev *podiumv1.TaskEvent, c *attempt.Cursor) {
				if n := ev.GetNote(); n != nil {
					notes = append(notes, n.GetText())
				}
				if c != nil {
					cur = *c
				}
			}
			return r
		}
		l1 := &lineNotes{r: mk(attempt.Cursor{}), name: "db"}
		rd, _ := runlog.NewReader(f, runlog.Position{})
		for range stopAt {
			rec, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			l1.add(rec, rd.Position())
		}
		from := cur.Sidecars["db"]
		l2 := &lineNotes{r: mk(cur), name: "db", last: from}
		rd, _ = runlog.NewReader(f, from)
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			l2.add(rec, rd.Position())
		}
		l2.close()
		all := strings.Join(notes, "\n")
		if strings.Contains(all, "Q") {
			t.Fatalf("stopped after %d records: a piece of the secret is shown: %q", stopAt, notes)
		}
		if got, want := squash(all), "onetwothreefourfivesix"; got != want {
			t.Fatalf("stopped after %d records: notes %q, text %q, want %q", stopAt, notes, got, want)
		}
	}
}
