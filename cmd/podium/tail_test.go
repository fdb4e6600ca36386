package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// logs --tail N prints the last N lines of the stored output, stdout and
// stderr counted together in the order they came and each written to its
// own stream (a last line without its newline counts as a line); -f goes on
// after them, from the event where the stored log ended; 0 prints none of
// the stored lines; a bad N is a usage error.
func TestLogsTail(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_FAILED
	f.task.ExitCode = i32(3)
	f.events = []*podiumv1.TaskEvent{
		stdoutEv("a\nb\n"), stderrEv("e1\n"), stdoutEv("c\nd"), statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(3), 0),
	}
	var calls []string
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		calls = append(calls, fmt.Sprintf("follow=%v after=%d", req.Msg.GetFollow(), req.Msg.GetAfterSeq()))
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), len(f.events)); err != nil {
			return err
		}
		return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
	}
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"--tail", "3", "--quiet"}, "c\nd", "e1\n"},
		{[]string{"--tail", "1", "--quiet"}, "d", ""},
		{[]string{"--tail", "0", "--quiet"}, "", ""},
		{[]string{"--tail", "99", "--quiet"}, "a\nb\nc\nd", "e1\n"},
		{[]string{"--tail", "all", "--quiet"}, "a\nb\nc\nd", "e1\n"},
		// The "→" line is part of what logs prints: here it ends the line
		// the task left unfinished on stdout (as on a terminal).
		{[]string{"--tail", "2"}, "c\nd", "→ failed: exit code 3\n"},
	} {
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		if code := cli.run(t, append(append([]string{"logs"}, tc.args...), "task_01TEST")...); code != 0 {
			t.Fatalf("logs %v: exit %d; stderr:\n%s", tc.args, code, cli.errOut)
		}
		if cli.out.String() != tc.stdout || cli.errOut.String() != tc.stderr {
			t.Errorf("logs %v: stdout %q, stderr %q; want %q, %q", tc.args, cli.out, cli.errOut, tc.stdout, tc.stderr)
		}
	}

	calls = nil
	f.events = f.events[:2] // the task still runs: its last line and end come later
	f.task.State, f.task.ExitCode = podiumv1.TaskState_TASK_STATE_RUNNING, nil
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		calls = append(calls, fmt.Sprintf("follow=%v after=%d", req.Msg.GetFollow(), req.Msg.GetAfterSeq()))
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), 2); err != nil || !req.Msg.GetFollow() {
			return err
		}
		for i, ev := range []*podiumv1.TaskEvent{stdoutEv("c\n"), statusEv(podiumv1.TaskState_TASK_STATE_SUCCEEDED, "", i32(0), 0)} {
			if err := s.Send(&podiumv1.EventsResponse{Seq: uint64(3 + i), Event: ev}); err != nil {
				return err
			}
		}
		return s.Send(&podiumv1.EventsResponse{Task: &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_SUCCEEDED, ExitCode: i32(0)}})
	}
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "logs", "-f", "--tail", "1", "--quiet", "task_01TEST"); code != 0 {
		t.Fatalf("logs -f --tail 1: exit %d; stderr:\n%s", code, cli.errOut)
	}
	if cli.out.String() != "c\n" || cli.errOut.String() != "e1\n" {
		t.Errorf("logs -f --tail 1: stdout %q, stderr %q; want the last stored line (e1) and then what followed (c)", cli.out, cli.errOut)
	}
	if want := "[follow=false after=0 follow=true after=2]"; fmt.Sprint(calls) != want {
		t.Errorf("Events calls %v, want %s: the follow goes on after the stored log", calls, want)
	}

	for _, bad := range []string{"-1", "ten", ""} {
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		if code := cli.run(t, "logs", "--tail", bad, "task_01TEST"); code != exitUsage || !strings.Contains(cli.errOut.String(), "give a number of lines, 0 or more, or all") {
			t.Errorf("logs --tail %q: exit %d, stderr %q; want 2 and what to give", bad, code, cli.errOut)
		}
	}
}

// The tail buffer keeps no more than it needs: a few segments for a long log
// of short lines, and at most tailMaxBytes of a log without newlines, whose
// end it still prints exactly.
func TestTailBufferIsBounded(t *testing.T) {
	t.Parallel()
	b := &tailBuffer{n: 2}
	for i := range 100000 {
		fmt.Fprintf(b.stdout(), "line %d\n", i)
	}
	if len(b.segs) > 3 {
		t.Errorf("after 100,000 one-line writes the buffer for 2 lines holds %d segments", len(b.segs))
	}
	var out, errs bytes.Buffer
	if _, err := b.writeTo(&out, &errs); err != nil || out.String() != "line 99998\nline 99999\n" {
		t.Errorf("the last 2 lines: %q, %v", out.String(), err)
	}

	b = &tailBuffer{n: 5}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 40 {
		_, _ = b.stderr().Write(chunk)
	}
	_, _ = b.stderr().Write([]byte("end"))
	if b.bytes > tailMaxBytes {
		t.Errorf("the buffer holds %d bytes of a 40 MiB line, more than %d", b.bytes, tailMaxBytes)
	}
	out.Reset()
	errs.Reset()
	mid, err := b.writeTo(&out, &errs)
	if err != nil || !mid || errs.Len() != tailMaxBytes || !strings.HasSuffix(errs.String(), "xend") || out.Len() != 0 {
		t.Errorf("a 40 MiB line: %d bytes on stderr ending %q (mid-line %v), %d on stdout, %v", errs.Len(), errs.String()[max(0, errs.Len()-4):], mid, out.Len(), err)
	}
}
