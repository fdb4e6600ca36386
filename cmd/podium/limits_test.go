package main

import (
	"fmt"
	"strings"
	"testing"
)

// The spec's limits, and text that is not UTF-8, are refused by podium run
// before anything is sent, naming the flag, the argument or the field.
func TestRunRefusesPastLimitsLocally(t *testing.T) {
	t.Parallel()
	repeat := func(flag string, n int, value func(int) string) []string {
		var out []string
		for i := range n {
			out = append(out, flag, value(i))
		}
		return out
	}
	envFile := func(n int) string {
		var b strings.Builder
		b.WriteString("image: alpine:3\nenv:\n")
		for i := range n {
			fmt.Fprintf(&b, "  K%d: v\n", i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		spec string
		want []string
	}{
		{"--image not UTF-8", []string{"--image", "alpine\xff"}, "", []string{"--image: the value is not valid UTF-8"}},
		{"--env not UTF-8", []string{"--image", "alpine:3", "--env", "A=\xc3"}, "", []string{"--env: the value is not valid UTF-8"}},
		{"--label not UTF-8", []string{"--image", "alpine:3", "--label", "\xff"}, "", []string{"--label: the value is not valid UTF-8"}},
		{"--timeout not UTF-8", []string{"--image", "alpine:3", "--timeout", "1\xffm"}, "", []string{"--timeout: the value is not valid UTF-8"}},
		{"a command argument not UTF-8", []string{"--image", "alpine:3", "--", "printf", "\xff"}, "",
			[]string{"argument 2 of the task's command is not valid UTF-8"}},
		{"an upper-case image", []string{"--image", "BusyBox:Latest"}, "", []string{"spec.image", "must be lowercase"}},
		{"an image with a shell command", []string{"--image", "busybox;rm${IFS}-rf"}, "", []string{"spec.image", "not an image reference"}},
		{"an image that is a flag", []string{"--image", "--help"}, "", []string{"spec.image", "not an image reference"}},
		{"--timeout past a year", []string{"--image", "alpine:3", "--timeout", "8761h"}, "", []string{"--timeout", "a year"}},
		{"--env value over 32 KiB", []string{"--image", "alpine:3", "--env", "A=" + strings.Repeat("v", 32<<10+1)}, "",
			[]string{`--env "A="`, "more than 32768"}},
		{"257 --env", append([]string{"--image", "alpine:3"}, repeat("--env", 257, func(i int) string { return fmt.Sprintf("K%d=v", i) })...), "",
			[]string{"spec.env", "257 variables, more than 256"}},
		{"65 --label", append([]string{"--image", "alpine:3"}, repeat("--label", 65, func(i int) string { return fmt.Sprintf("l%d", i) })...), "",
			[]string{"spec.labels", "more than 64"}},
		{"a command over 64 KiB", []string{"--image", "alpine:3", "--", "sh", "-c", strings.Repeat("x", 64<<10)}, "",
			[]string{"spec.command:", "more than 65536"}},
		{"an argument over MAX_ARG_STRLEN", []string{"--image", "alpine:3", "--", "echo", strings.Repeat("x", 128<<10)}, "",
			[]string{"spec.command[1]", "MAX_ARG_STRLEN"}},
		{"env of 300 keys in the file", nil, envFile(300), []string{"task.yaml", "line 3", "env has 300 keys, more than 256"}},
		{"a timeout past a year in the file", nil, "image: a\ntimeout: 10000h\n", []string{"task.yaml", "line 2", "timeout", "a year"}},
		{"9 sidecars in the file", nil, "image: a\nsidecars:\n" + strings.Repeat("  - {name: s, image: b}\n", 9),
			[]string{"spec.sidecars", "9 sidecars, more than 8"}},
		{"an upper-case image in the file", nil, "image: Alpine\n", []string{"spec.image", "must be lowercase"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			args := []string{"--server", f.url(), "--token", "secret", "run"}
			if tc.spec != "" {
				args = append(args, "--spec", writeFile(t, "task.yaml", tc.spec))
			}
			args = append(args, tc.args...)
			tcli := newTestCLI(nil)
			if code := tcli.run(t, args...); code != exitPodium {
				t.Errorf("exit %d, want 125", code)
			}
			stderr := tcli.errOut.String()
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr should contain %q:\n%.2000s", w, stderr)
				}
			}
			for _, not := range []string{"internal", "unavailable"} {
				if strings.Contains(stderr, not) {
					t.Errorf("stderr blames the %s:\n%.2000s", not, stderr)
				}
			}
			if reqs := f.recorded(); len(reqs) != 0 {
				t.Errorf("the coordinator got %d requests (%v), want none", len(reqs), f.paths())
			}
		})
	}
}

// Other commands refuse text that is not UTF-8, and a cancel's reason past
// its bound, as usage errors naming what is wrong, sending nothing.
func TestCommandsRefuseBadTextLocally(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"a reason past 1 KiB", []string{"task", "cancel", "--reason", strings.Repeat("r", 1025), "task_01TEST"}, "", "--reason: is 1025 bytes, more than 1024"},
		{"a reason not UTF-8", []string{"task", "cancel", "--reason", "oops\xff", "task_01TEST"}, "", "--reason: the value is not valid UTF-8"},
		{"a task id not UTF-8", []string{"task", "get", "task_\xff"}, "", "argument 1 is not valid UTF-8"},
		{"a message not UTF-8", []string{"task", "send", "task_01TEST", "hi", "\xff"}, "", "argument 3 is not valid UTF-8"},
		{"a message on stdin not UTF-8", []string{"task", "send", "task_01TEST", "-"}, "bin\xffary\n", "stdin is not valid UTF-8"},
		{"a token label not UTF-8", []string{"token", "create", "--label", "\xff"}, "", "--label: the value is not valid UTF-8"},
		{"a node label not UTF-8", []string{"node", "label", "node_01TEST", "--add", "gpu\xff"}, "", "--add: the value is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			tcli := newTestCLI(nil)
			tcli.stdin = strings.NewReader(tc.stdin)
			if code := tcli.run(t, append([]string{"--server", f.url()}, tc.args...)...); code != exitUsage {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(tcli.errOut.String(), tc.want) {
				t.Errorf("stderr should contain %q:\n%.2000s", tc.want, tcli.errOut)
			}
			if reqs := f.recorded(); len(reqs) != 0 {
				t.Errorf("the coordinator got %d requests (%v), want none", len(reqs), f.paths())
			}
		})
	}
}
