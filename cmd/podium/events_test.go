package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// chunkWriter records each Write separately, to check that a chunk is
// written as it arrives, in one piece, and never merged or split.
type chunkWriter struct{ writes [][]byte }

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func (w *chunkWriter) all() []byte { return bytes.Join(w.writes, nil) }

func TestPrinterPassesBinaryOutputThroughByteForByte(t *testing.T) {
	var every [256]byte
	for i := range every {
		every[i] = byte(i)
	}
	stdoutChunks := [][]byte{
		every[:],
		[]byte("\r\n\r"),
		[]byte("→ not podium's, the task's own arrow\n"),
		{0xff, 0xfe, 0x00},
		[]byte("no trailing newline"),
	}
	stderrChunks := [][]byte{[]byte("err\x00\x01\n"), {0x80}, []byte("\n")}

	var out, errOut chunkWriter
	p := newPrinter(&out, &errOut, false)
	ctx := context.Background()
	for i, c := range stdoutChunks {
		ev := &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Data: c}}}
		if err := p.event(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if i < len(stderrChunks) {
			ev := &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDERR, Data: stderrChunks[i]}}}
			if err := p.event(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(out.writes) != len(stdoutChunks) {
		t.Errorf("stdout got %d writes, want one per chunk (%d)", len(out.writes), len(stdoutChunks))
	}
	for i := range min(len(out.writes), len(stdoutChunks)) {
		if !bytes.Equal(out.writes[i], stdoutChunks[i]) {
			t.Errorf("stdout write %d = %q, want %q", i, out.writes[i], stdoutChunks[i])
		}
	}
	if want := bytes.Join(stderrChunks, nil); !bytes.Equal(errOut.all(), want) {
		t.Errorf("stderr = %q, want exactly the task's stderr %q", errOut.all(), want)
	}
}

func TestPrinterNotesGoToStderrOnly(t *testing.T) {
	var out, errOut bytes.Buffer
	p := newPrinter(&out, &errOut, false)
	ctx := context.Background()
	for _, ev := range []*podiumv1.TaskEvent{
		stdoutEv("a"),
		noteEv("pulling image alpine:3\n"),
		stdoutEv("b\n"),
		statusEv(podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0),
		noteEv("two\nlines"),
		statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(3), 0),
	} {
		if err := p.event(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != "ab\n" {
		t.Errorf("stdout = %q, want only the task's output", out.String())
	}
	want := "→ pulling image alpine:3\n→ running\n→ two\n  lines\n→ failed: exit code 3\n"
	if errOut.String() != want {
		t.Errorf("stderr = %q, want %q", errOut.String(), want)
	}
	for line := range strings.Lines(errOut.String()) {
		if !strings.HasPrefix(line, "→ ") && !strings.HasPrefix(line, "  ") {
			t.Errorf("stderr line %q is neither a → line nor its continuation", line)
		}
	}
}

func TestPrinterStartsNotesOnTheirOwnLine(t *testing.T) {
	// A task's partial stderr line must not swallow the → line that follows.
	var out, errOut bytes.Buffer
	p := newPrinter(&out, &errOut, false)
	_ = p.event(context.Background(), stderrEv("progress 50%"))
	p.note("cancelling")
	_ = p.event(context.Background(), stderrEv("done\n"))
	p.note("cancelled")
	if want := "progress 50%\n→ cancelling\ndone\n→ cancelled\n"; errOut.String() != want {
		t.Errorf("stderr = %q, want %q", errOut.String(), want)
	}
}

func TestPrinterQuiet(t *testing.T) {
	var out, errOut bytes.Buffer
	p := newPrinter(&out, &errOut, true)
	ctx := context.Background()
	for _, ev := range []*podiumv1.TaskEvent{
		noteEv("pulling"), stderrEv("e\n"), statusEv(podiumv1.TaskState_TASK_STATE_SUCCEEDED, "", i32(0), 0), stdoutEv("o"),
	} {
		_ = p.event(ctx, ev)
	}
	p.final(&podiumv1.Task{State: podiumv1.TaskState_TASK_STATE_SUCCEEDED})
	p.fail("an error of podium's own")
	if out.String() != "o" || errOut.String() != "e\npodium: an error of podium's own\n" {
		t.Errorf("quiet: stdout %q, stderr %q", out.String(), errOut.String())
	}
}

func TestPrinterFinalOnlyWhenNoStatusEventShowedTheEnd(t *testing.T) {
	var errOut bytes.Buffer
	p := newPrinter(&bytes.Buffer{}, &errOut, false)
	_ = p.event(context.Background(), statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(2), 0))
	p.final(&podiumv1.Task{State: podiumv1.TaskState_TASK_STATE_FAILED, ExitCode: i32(2)})
	if strings.Count(errOut.String(), "failed") != 1 {
		t.Errorf("the end was printed twice:\n%s", errOut.String())
	}

	errOut.Reset()
	p = newPrinter(&bytes.Buffer{}, &errOut, false)
	p.final(&podiumv1.Task{State: podiumv1.TaskState_TASK_STATE_LOST, Reason: "node gone"})
	if errOut.String() != "→ lost: node gone\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
}

func TestPrinterNodeOfTheSameAttemptOnly(t *testing.T) {
	var errOut bytes.Buffer
	p := newPrinter(&bytes.Buffer{}, &errOut, false)
	p.node = func(context.Context) (string, int32) { return "node_B", 2 }
	ev := statusEv(podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0) // attempt 1
	_ = p.event(context.Background(), ev)
	ev.Attempt = 2
	_ = p.event(context.Background(), ev)
	if want := "→ running\n→ running on node_B\n"; errOut.String() != want {
		t.Errorf("stderr = %q, want %q (an earlier attempt's node is not known)", errOut.String(), want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestPrinterReportsWriteErrors(t *testing.T) {
	p := newPrinter(failWriter{}, &bytes.Buffer{}, false)
	if err := p.event(context.Background(), stdoutEv("x")); err == nil || !strings.Contains(err.Error(), "stdout") {
		t.Errorf("event() = %v, want a write error naming stdout", err)
	}
}
