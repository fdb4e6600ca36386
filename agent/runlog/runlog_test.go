package runlog_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/runlog"
)

type rec struct {
	stream runlog.Stream
	off    uint64
	data   string
}

// readAll reads path from pos to its current end.
func readAll(t *testing.T, path string, pos runlog.Position) ([]rec, *runlog.Exit, runlog.Position, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := runlog.NewReader(f, pos)
	if err != nil {
		t.Fatal(err)
	}
	var out []rec
	for {
		x, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil, r.Position(), nil
		}
		if err != nil {
			return out, nil, r.Position(), err
		}
		if x.Exit != nil {
			return out, x.Exit, r.Position(), nil
		}
		out = append(out, rec{x.Stream, x.Offset, string(x.Data)})
	}
}

func TestWriteReadAndResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	if err := runlog.Create(path); err != nil {
		t.Fatal(err)
	}
	w, err := runlog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", runlog.MaxRecordData+10)
	for _, s := range []struct {
		st runlog.Stream
		d  string
	}{{runlog.Stdout, "one\n"}, {runlog.Stderr, "err\n"}, {runlog.Stdout, "two\n"}, {runlog.Stdout, big}} {
		if err := w.Write(s.st, []byte(s.d)); err != nil {
			t.Fatal(err)
		}
	}
	recs, exit, end, err := readAll(t, path, runlog.Position{})
	if err != nil || exit != nil {
		t.Fatalf("read: %v %v", err, exit)
	}
	want := []rec{{runlog.Stdout, 0, "one\n"}, {runlog.Stderr, 0, "err\n"}, {runlog.Stdout, 4, "two\n"},
		{runlog.Stdout, 8, big[:runlog.MaxRecordData]}, {runlog.Stdout, 8 + runlog.MaxRecordData, "xxxxxxxxxx"}}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Fatalf("record %d = %v, want %v", i, recs[i], want[i])
		}
	}
	if end.Stdout != uint64(8+len(big)) || end.Stderr != 4 {
		t.Fatalf("end position %+v", end)
	}

	// Resuming inside the third record skips what was consumed of it.
	f, _ := os.Open(path)
	r, _ := runlog.NewReader(f, runlog.Position{})
	var third runlog.Record
	for i := 0; i < 3; i++ {
		third, _ = r.Next()
	}
	f.Close()
	mid := r.Position()
	mid.File = third.Start
	mid = mid.WithConsumed(runlog.Stdout, 6) // "tw" of "two\n" consumed
	recs, _, _, _ = readAll(t, path, mid)
	if recs[0] != (rec{runlog.Stdout, 6, "o\n"}) {
		t.Fatalf("resumed record %v", recs[0])
	}

	if err := w.Exit(runlog.Exit{Code: 3, Signal: 0}); err != nil {
		t.Fatal(err)
	}
	if _, exit, _, _ = readAll(t, path, end); exit == nil || exit.Code != 3 {
		t.Fatalf("exit %v", exit)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A runner started again on the same log (docker start of a stopped
// container) continues its offsets, after cutting off a torn tail and the old
// exit record.
func TestReopenContinues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	w, err := runlog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(runlog.Stdout, []byte("abc"))
	_ = w.Exit(runlog.Exit{Code: 1})
	_ = w.Close()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.Write([]byte{1, 0, 0}) // a torn record
	f.Close()

	if recs, _, _, err := readAll(t, path, runlog.Position{}); err != nil || len(recs) != 1 {
		t.Fatalf("a torn tail must read as 'not yet': %v %v", recs, err)
	}
	w, err = runlog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(runlog.Stdout, []byte("def"))
	_ = w.Close()
	recs, exit, _, err := readAll(t, path, runlog.Position{})
	if err != nil || exit != nil || len(recs) != 2 || recs[1] != (rec{runlog.Stdout, 3, "def"}) {
		t.Fatalf("records %v exit %v err %v", recs, exit, err)
	}
}

func TestCorruptionIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	w, _ := runlog.OpenWriter(path)
	_ = w.Write(runlog.Stdout, []byte("hello"))
	_ = w.Close()
	b, _ := os.ReadFile(path)
	b[len(runlog.Magic)+13] ^= 0xff // flip a data byte
	_ = os.WriteFile(path, b, 0o644)
	if _, _, _, err := readAll(t, path, runlog.Position{}); !errors.Is(err, runlog.ErrCorrupt) {
		t.Fatalf("err %v, want ErrCorrupt", err)
	}
	_ = os.WriteFile(path, []byte("not a log at all, no"), 0o644)
	if _, err := runlog.OpenWriter(path); err == nil || !strings.Contains(err.Error(), "not a runner log") {
		t.Fatalf("OpenWriter on a foreign file: %v", err)
	}
}
