package main

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestTaskSend(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_RUNNING
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "send", "task_01TEST", "use", "the", " second  ", "one"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if len(f.sends) != 1 || f.sends[0].GetId() != "task_01TEST" || f.sends[0].GetText() != "use the  second   one" {
		t.Errorf("Send requests = %v, want the words joined with single spaces", f.sends)
	}
	if cli.out.String() != "" {
		t.Errorf("stdout = %q, want nothing", cli.out)
	}
	if cli.errOut.String() != "→ message 42 sent\n" {
		t.Errorf("stderr = %q", cli.errOut)
	}

	// A TEXT starting with a dash, after "--"; one that looks like a number
	// needs nothing.
	for _, args := range [][]string{
		{"task", "send", "task_01TEST", "--", "-n", "3"},
		{"task", "send", "task_01TEST", "-5", "degrees"},
	} {
		cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		if code := cli.run(t, args...); code != 0 {
			t.Fatalf("podium %v: exit %d; stderr:\n%s", args, code, cli.errOut)
		}
	}
	if got := f.sends[len(f.sends)-2].GetText() + "|" + f.sends[len(f.sends)-1].GetText(); got != "-n 3|-5 degrees" {
		t.Errorf("texts = %q", got)
	}
}

func TestTaskSendFromStdin(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_SCHEDULED
	for _, tc := range []struct{ stdin, want string }{
		{"yes\n", "yes"}, // echo's newline is not part of the message
		{"line 1\nline 2\n\n", "line 1\nline 2\n"}, // only the final one goes
		{"windows\r\n", "windows"},
		{"no newline", "no newline"},
		{"carriage\r", "carriage\r"},
		{strings.Repeat("x", maxMessageBytes) + "\r\n", strings.Repeat("x", maxMessageBytes)},
	} {
		f.sends = nil
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		cli.stdin = strings.NewReader(tc.stdin)
		if code := cli.run(t, "task", "send", "task_01TEST", "-"); code != 0 {
			t.Fatalf("stdin %q: exit %d; stderr:\n%s", tc.stdin, code, cli.errOut)
		}
		if len(f.sends) != 1 || f.sends[0].GetText() != tc.want {
			t.Errorf("stdin %q: sent %q, want %q", tc.stdin, f.sends, tc.want)
		}
	}

	// "-" among other words is a word.
	f.sends = nil
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "send", "task_01TEST", "5", "-", "3"); code != 0 || len(f.sends) != 1 || f.sends[0].GetText() != "5 - 3" {
		t.Errorf("exit %d, sent %v", code, f.sends)
	}

	// Too much on stdin is refused before anything is sent, even when what
	// is past the limit is a newline and more.
	for _, stdin := range []string{
		strings.Repeat("x", maxMessageBytes+1),
		strings.Repeat("x", maxMessageBytes) + "\r\nmore",
		strings.Repeat("x", maxMessageBytes) + "\n\n",
	} {
		f := newFake(t)
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		cli.stdin = strings.NewReader(stdin)
		if code := cli.run(t, "task", "send", "task_01TEST", "-"); code != exitUsage {
			t.Errorf("%d bytes on stdin: exit %d, want 2", len(stdin), code)
		}
		if !strings.Contains(cli.errOut.String(), "stdin holds more than the 65536 bytes") {
			t.Errorf("stderr:\n%s", cli.errOut)
		}
		if p := f.paths(); len(p) != 0 {
			t.Errorf("a refused message sent %v", p)
		}
	}
}

func TestTaskSendRefused(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_QUEUED
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	// Not on a node: the coordinator's sentence, exit 125.
	if code := cli.run(t, "task", "send", "task_01TEST", "hi"); code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	if want := "podium: task task_01TEST cannot take messages: the task is not on a node (it is queued)\n"; cli.errOut.String() != want {
		t.Errorf("stderr = %q, want %q", cli.errOut, want)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "send", "task_01NOPE", "hi"); code != exitUsage || cli.errOut.String() != "podium: no task task_01NOPE\n" {
		t.Errorf("unknown task: exit %d, stderr %q", code, cli.errOut)
	}

	f.err = connect.NewError(connect.CodeInvalidArgument, errors.New("text: 70000 bytes is more than 65536"))
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "send", "task_01TEST", "hi"); code != exitPodium || cli.errOut.String() != "podium: text: 70000 bytes is more than 65536\n" {
		t.Errorf("invalid: exit %d, stderr %q", code, cli.errOut)
	}
}
