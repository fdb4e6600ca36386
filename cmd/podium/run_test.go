package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestExitCode(t *testing.T) {
	const (
		succeeded = podiumv1.TaskState_TASK_STATE_SUCCEEDED
		failed    = podiumv1.TaskState_TASK_STATE_FAILED
		cancelled = podiumv1.TaskState_TASK_STATE_CANCELLED
		lost      = podiumv1.TaskState_TASK_STATE_LOST
	)
	for _, tc := range []struct {
		name string
		task *podiumv1.Task
		want int
	}{
		{"succeeded", &podiumv1.Task{State: succeeded, ExitCode: i32(0)}, 0},
		{"succeeded without exit code", &podiumv1.Task{State: succeeded}, 0},
		{"failed with exit code 3", &podiumv1.Task{State: failed, ExitCode: i32(3)}, 3},
		{"failed with exit code 1", &podiumv1.Task{State: failed, ExitCode: i32(1)}, 1},
		{"failed with exit code 255", &podiumv1.Task{State: failed, ExitCode: i32(255)}, 255},
		{"failed with exit code 125 from the task", &podiumv1.Task{State: failed, ExitCode: i32(125)}, 125},
		{"killed by SIGKILL", &podiumv1.Task{State: failed, Signal: 9}, 137},
		{"killed by SIGTERM, exit code also set", &podiumv1.Task{State: failed, ExitCode: i32(143), Signal: 15}, 143},
		{"signal wins over exit code", &podiumv1.Task{State: failed, ExitCode: i32(1), Signal: 9}, 137},
		{"image missing: failed, no exit code", &podiumv1.Task{State: failed, Reason: "image not found"}, 125},
		{"engine restarted: failed, no exit code", &podiumv1.Task{State: failed,
			Reason: "engine restarted: the Docker engine on this node stopped or restarted while the task ran, and stopped the task's container (its process was ended by signal 15)"}, 125},
		{"failed with exit code 0", &podiumv1.Task{State: failed, ExitCode: i32(0)}, 125},
		{"failed with impossible exit code", &podiumv1.Task{State: failed, ExitCode: i32(300)}, 125},
		{"failed with negative exit code", &podiumv1.Task{State: failed, ExitCode: i32(-1)}, 125},
		{"failed with impossible signal", &podiumv1.Task{State: failed, Signal: 200}, 125},
		{"cancelled", &podiumv1.Task{State: cancelled}, 130},
		{"cancelled after SIGTERM", &podiumv1.Task{State: cancelled, ExitCode: i32(143), Signal: 15}, 130},
		{"lost", &podiumv1.Task{State: lost, Reason: "node offline"}, 125},
		{"not ended (queued)", &podiumv1.Task{State: podiumv1.TaskState_TASK_STATE_QUEUED}, 125},
		{"running", &podiumv1.Task{State: podiumv1.TaskState_TASK_STATE_RUNNING}, 125},
		{"unspecified", &podiumv1.Task{}, 125},
		{"nil", nil, 125},
	} {
		if got := exitCode(tc.task); got != tc.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tc.name, tc.task, got, tc.want)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullSpec = `image: alpine:3
command: [echo, from-file]
env:
  KEEP: file
  OVERRIDE: file
labels: [linux]
timeout: 1m
user: nobody
priority: 5
max_attempts: 2
retry_on_node_loss: true
resources:
  memory_mb: 64
capabilities: [cap_chown]
sidecars:
  - name: db
    image: postgres:16
    readiness: {tcp_port: 5432, timeout: 30s}
`

func TestRunFlagsOverrideSpecFile(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	spec := writeFile(t, "task.yaml", fullSpec)
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--spec", spec,
		"--image", "busybox:1", "--env", "OVERRIDE=flag", "--env", "NEW=x=y", "--label", "gpu=a100", "--label", "linux",
		"--timeout", "90s", "--priority", "-3", "--cap-add", "net_raw", "--cap-add", "CHOWN", "--user", "1000:1000", "--pull", "never", "--retain", "7d",
		"--allow-egress", "192.0.2.10", "--allow-egress", "10.20.0.0/16", "--allow-egress", "192.0.2.10", "--", "sh", "-c", "exit 0")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, tc.errOut)
	}
	want := &podiumv1.TaskSpec{
		Image:           "busybox:1",
		Command:         []string{"sh", "-c", "exit 0"},
		Env:             map[string]string{"KEEP": "file", "OVERRIDE": "flag", "NEW": "x=y"},
		Labels:          []string{"linux", "gpu=a100"},
		TimeoutSeconds:  90,
		User:            "1000:1000",
		Pull:            "never",
		RetainSeconds:   7 * 24 * 3600,
		Priority:        -3,
		MaxAttempts:     2,
		RetryOnNodeLoss: true,
		Resources:       &podiumv1.Resources{MemoryMb: 64},
		// The file's capability made canonical, --cap-add's added, the
		// repeat dropped.
		Capabilities: []string{"CHOWN", "NET_RAW"},
		// As written, the repeat dropped.
		AllowEgress: []string{"192.0.2.10", "10.20.0.0/16"},
		// Sidecars have no flags: the file's pass through untouched.
		Sidecars: []*podiumv1.Sidecar{{
			Name: "db", Image: "postgres:16",
			Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 30},
		}},
	}
	if !proto.Equal(f.spec, want) {
		t.Errorf("submitted spec:\n got %v\nwant %v", f.spec, want)
	}
}

func TestRunUnsetFlagsKeepSpecFile(t *testing.T) {
	// Only flags given on the command line override: an absent --priority
	// must not reset the file's priority to 0, nor an absent command its
	// command.
	o := &runOptions{specFile: writeFile(t, "task.yaml", fullSpec), set: map[string]bool{}}
	spec, err := o.buildSpec(nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetPriority() != 5 || spec.GetTimeoutSeconds() != 60 || spec.GetImage() != "alpine:3" || spec.GetUser() != "nobody" ||
		strings.Join(spec.GetCommand(), " ") != "echo from-file" ||
		strings.Join(spec.GetCapabilities(), " ") != "CHOWN" || len(spec.GetSidecars()) != 1 {
		t.Errorf("buildSpec without flags = %v, want the file's fields", spec)
	}
}

func TestRunSpecFromStdin(t *testing.T) {
	o := &runOptions{specFile: "-", set: map[string]bool{}}
	spec, err := o.buildSpec(strings.NewReader("image: alpine:3\n"))
	if err != nil || spec.GetImage() != "alpine:3" {
		t.Fatalf("buildSpec(stdin) = %v, %v", spec, err)
	}
}

// TestRunRefusesBadInputLocally checks that a task podium can tell is wrong
// is refused with exit 125 and a message naming the problem, and that nothing
// at all reaches the coordinator.
func TestRunRefusesBadInputLocally(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		spec string // contents of --spec, if any
		want []string
	}{
		{"no image", []string{"--", "echo", "hi"}, "", []string{"spec.image: required", "--image"}},
		{"spec file without image", nil, "command: [true]\n", []string{"spec.image: required"}},
		{"unknown key in spec file", nil, "image: alpine:3\nimgae: x\n", []string{"task.yaml", "line 2", `unknown key "imgae"`}},
		{"env without =", []string{"--image", "alpine:3", "--env", "FOO"}, "", []string{`--env "FOO": want KEY=VALUE`}},
		{"env with bad key", []string{"--image", "alpine:3", "--env", "MY VAR=1"}, "", []string{`--env "MY VAR=1"`}},
		{"bad label", []string{"--image", "alpine:3", "--label", "a b"}, "", []string{"--label", `"a b"`}},
		{"timeout without unit", []string{"--image", "alpine:3", "--timeout", "10"}, "", []string{"--timeout", "no unit"}},
		{"negative timeout", []string{"--image", "alpine:3", "--timeout", "-1s"}, "", []string{"--timeout", "negative"}},
		{"retain too short", []string{"--image", "alpine:3", "--retain", "10m"}, "", []string{"--retain", "shorter than 1h"}},
		{"retain without unit", []string{"--image", "alpine:3", "--retain", "7"}, "", []string{"--retain", "has no unit", `"90d"`}},
		{"retain in file too long", nil, "image: a\nretain: 20y\n", []string{"retain", "more than 10y"}},
		{"bad user", []string{"--image", "alpine:3", "--user", "www-data:www-data"}, "", []string{"--user", `"www-data:www-data" is not a user`}},
		{"unknown pull policy", []string{"--image", "alpine:3", "--pull", "missing"}, "", []string{`--pull "missing" is not a pull policy`, "if-not-present, always, never"}},
		{"unknown pull policy in file", nil, "image: a\npull: IfNotPresent\n", []string{"spec.pull", "if-not-present, always, never"}},
		{"bad user in file", nil, "image: a\nuser: Root\n", []string{"spec.user", `"Root" is not a user`}},
		{"priority out of range", []string{"--image", "alpine:3", "--priority", "3000000000"}, "", []string{"--priority", "out of range"}},
		{"relative working_dir in file", nil, "image: a\nworking_dir: rel\n", []string{"spec.working_dir"}},
		{"cap-add not allowed", []string{"--image", "alpine:3", "--cap-add", "SYS_ADMIN"}, "", []string{`--cap-add: "SYS_ADMIN" may not be added`, "NET_BIND_SERVICE"}},
		{"cap-add ALL", []string{"--image", "alpine:3", "--cap-add", "all"}, "", []string{"--cap-add", `"all" would grant every capability`}},
		{"allow-egress not a range", []string{"--image", "alpine:3", "--allow-egress", "metadata"}, "", []string{`--allow-egress: "metadata" is not an address or a CIDR range`}},
		{"allow-egress with host bits", []string{"--image", "alpine:3", "--allow-egress", "10.0.0.1/8"}, "", []string{"--allow-egress", "write 10.0.0.0/8"}},
		{"allow_egress in file not a range", nil, "image: a\nallow_egress: [10.0.0.0/8, 300.0.0.1]\n", []string{`spec.allow_egress[1]: "300.0.0.1" is not an address`}},
		{"capability in file not allowed", nil, "image: a\ncapabilities: [CHOWN, NET_ADMIN]\n", []string{`spec.capabilities[1]: "NET_ADMIN" may not be added`}},
		{"sidecar without image in file", nil, "image: a\nsidecars:\n  - name: db\n", []string{"spec.sidecars[0].image: required"}},
		{"unknown sidecar key in file", nil, "image: a\nsidecars:\n  - name: db\n    imgae: x\n", []string{"task.yaml", "line 4", `unknown key "sidecars[0].imgae"`}},
		{"missing spec file", []string{"--spec", "/nonexistent/task.yaml"}, "", []string{"--spec", "/nonexistent/task.yaml"}},
		{"unknown flag", []string{"--imag", "alpine:3"}, "", []string{"flag provided but not defined: -imag", "Usage: podium run"}},
		{"bad flag value", []string{"--priority", "high"}, "", []string{"invalid value", "-priority"}},
		{"bad server", []string{"--server", "ftp://x", "--image", "a"}, "", []string{`--server "ftp://x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			args := []string{"--server", f.url(), "--token", "secret", "run"}
			if tc.spec != "" {
				args = append(args, "--spec", writeFile(t, "task.yaml", tc.spec))
			}
			args = append(args, tc.args...)
			tcli := newTestCLI(nil)
			code := tcli.run(t, args...)
			if code != exitPodium {
				t.Errorf("exit %d, want 125", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(tcli.errOut.String(), w) {
					t.Errorf("stderr should contain %q:\n%s", w, tcli.errOut)
				}
			}
			if reqs := f.recorded(); len(reqs) != 0 {
				t.Errorf("the coordinator got %d requests (%v), want none", len(reqs), f.paths())
			}
			if tcli.out.String() != "" {
				t.Errorf("stdout = %q, want nothing", tcli.out)
			}
		})
	}
}

func TestRunCannotReachCoordinator(t *testing.T) {
	url := closedURL(t)
	tc := newTestCLI(map[string]string{"PODIUM_SERVER": url})
	code := tc.run(t, "run", "--image", "alpine:3", "--", "true")
	if code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	msg := tc.errOut.String()
	for _, want := range []string{
		"podium: cannot reach the coordinator at " + url + ": dial tcp ",
		"(is podium-coordinator running? set --server or PODIUM_SERVER)\n",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr should contain %q:\n%s", want, msg)
		}
	}
	if strings.Count(msg, "\n") != 1 {
		t.Errorf("want exactly one line on stderr, got:\n%s", msg)
	}
}

func TestRunFollowsTaskToItsExitCode(t *testing.T) {
	f := newFake(t)
	f.task = &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_QUEUED, NodeId: "node_A", Attempt: 1}
	f.events = []*podiumv1.TaskEvent{
		statusEv(podiumv1.TaskState_TASK_STATE_SCHEDULED, "", nil, 0),
		noteEv("pulled alpine:3"),
		statusEv(podiumv1.TaskState_TASK_STATE_RUNNING, "", nil, 0),
		stdoutEv("hi\n"),
		stderrEv("oops\n"),
		stdoutEv("no newline"),
		statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(3), 0),
	}
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		f.setTask(func(t *podiumv1.Task) { t.State, t.ExitCode = podiumv1.TaskState_TASK_STATE_FAILED, i32(3) })
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), len(f.events)); err != nil {
			return err
		}
		return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
	}
	tc := newTestCLI(map[string]string{"PODIUM_TOKEN": "secret"})
	code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3", "--", "sh", "-c", "echo hi; exit 3")
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", code, tc.errOut)
	}
	if got, want := tc.out.String(), "hi\nno newline"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	wantErr := "→ task task_01TEST submitted\n" +
		"→ scheduled on node_A\n" +
		"→ pulled alpine:3\n" +
		"→ running on node_A\n" +
		"oops\n" +
		"→ failed: exit code 3\n"
	if got := tc.errOut.String(); got != wantErr {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, wantErr)
	}
	for _, r := range f.recorded() {
		if r.auth != "Bearer secret" {
			t.Errorf("%s sent Authorization %q, want %q", r.path, r.auth, "Bearer secret")
		}
		if r.proto != "HTTP/2.0" {
			t.Errorf("%s used %s, want HTTP/2 without TLS", r.path, r.proto)
		}
	}
	if f.afters[0] != 0 {
		t.Errorf("first Events call asked after_seq %d, want 0", f.afters[0])
	}
}

// TestRunReconnectsWithoutLosingOrRepeatingBytes breaks the event stream
// twice, once by resetting it mid-stream and once by refusing to serve, and
// has the coordinator resend an event the CLI has already printed: the output
// must still be every byte exactly once.
func TestRunReconnectsWithoutLosingOrRepeatingBytes(t *testing.T) {
	f := newFake(t)
	var want []byte
	for i := range 10 {
		chunk := fmt.Sprintf("line %d\n\x00\xff", i)
		want = append(want, chunk...)
		f.events = append(f.events, stdoutEv(chunk))
	}
	f.events = append(f.events, statusEv(podiumv1.TaskState_TASK_STATE_SUCCEEDED, "", i32(0), 0))
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		after := req.Msg.GetAfterSeq()
		switch call {
		case 1:
			if err := f.sendLog(s, after, 4); err != nil {
				return err
			}
			// Reset the HTTP/2 stream, as a crashing coordinator would.
			panic(http.ErrAbortHandler)
		case 2:
			return connect.NewError(connect.CodeUnavailable, errors.New("coordinator restarting"))
		case 3:
			// Resend the last event the client has, then stop cleanly
			// without the final task (a graceful shutdown).
			if err := f.sendLog(s, after-1, 7); err != nil {
				return err
			}
			return nil
		default:
			f.setTask(func(t *podiumv1.Task) { t.State, t.ExitCode = podiumv1.TaskState_TASK_STATE_SUCCEEDED, i32(0) })
			if err := f.sendLog(s, after, len(f.events)); err != nil {
				return err
			}
			return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
		}
	}
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3")
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.Bytes(); string(got) != string(want) {
		t.Errorf("stdout:\n got %q\nwant %q", got, want)
	}
	if got, want := fmt.Sprint(f.afters), "[0 4 4 7]"; got != want {
		t.Errorf("after_seq of the Events calls = %s, want %s", got, want)
	}
	errText := tc.errOut.String()
	if !strings.Contains(errText, "→ lost the event stream") || !strings.Contains(errText, "→ reconnected") {
		t.Errorf("stderr should tell of the lost stream and the reconnect:\n%s", errText)
	}
	if !strings.HasSuffix(errText, "→ succeeded\n") {
		t.Errorf("stderr should end with the task's end:\n%s", errText)
	}
}

func TestRunInterruptCancelsTaskAndWaitsForIt(t *testing.T) {
	f := newFake(t)
	tc := newTestCLI(nil)
	cancelled := make(chan struct{})
	f.cancelFn = func(*podiumv1.CancelRequest) {
		f.setTask(func(t *podiumv1.Task) { t.State = podiumv1.TaskState_TASK_STATE_CANCELLED; t.Reason = cancelReason })
		close(cancelled)
	}
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		if err := s.Send(&podiumv1.EventsResponse{Seq: 1, Event: stdoutEv("working\n")}); err != nil {
			return err
		}
		tc.sigs <- os.Interrupt
		select {
		case <-cancelled:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.Send(&podiumv1.EventsResponse{Seq: 2, Event: statusEv(podiumv1.TaskState_TASK_STATE_CANCELLED, cancelReason, nil, 15)}); err != nil {
			return err
		}
		return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
	}
	code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3")
	if code != exitCancel {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, tc.errOut)
	}
	if len(f.cancels) != 1 || f.cancels[0].GetId() != "task_01TEST" || f.cancels[0].GetReason() != cancelReason {
		t.Errorf("Cancel calls = %v, want one for task_01TEST with reason %q", f.cancels, cancelReason)
	}
	errText := tc.errOut.String()
	for _, want := range []string{"→ cancelling task task_01TEST", "→ cancelled: killed by signal 15 (SIGTERM): " + cancelReason} {
		if !strings.Contains(errText, want) {
			t.Errorf("stderr should contain %q:\n%s", want, errText)
		}
	}
	if tc.out.String() != "working\n" {
		t.Errorf("stdout = %q", tc.out)
	}
}

func TestRunSecondInterruptStopsWaiting(t *testing.T) {
	f := newFake(t)
	tc := newTestCLI(nil)
	f.cancelFn = func(*podiumv1.CancelRequest) { tc.sigs <- os.Interrupt }
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		if call == 1 {
			tc.sigs <- os.Interrupt
		}
		<-ctx.Done() // the task never ends
		return ctx.Err()
	}
	code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3")
	if code != exitCancel {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, tc.errOut)
	}
	if !strings.Contains(tc.errOut.String(), "podium: stopped following task task_01TEST") {
		t.Errorf("stderr:\n%s", tc.errOut)
	}
}

func TestRunDetach(t *testing.T) {
	f := newFake(t)
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--detach", "--image", "alpine:3", "--", "sleep", "1")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.String(); got != "task_01TEST\n" {
		t.Errorf("stdout = %q, want just the task id", got)
	}
	if got := f.paths(); len(got) != 1 || got[0] != "/podium.v1.TaskService/Submit" {
		t.Errorf("requests = %v, want only Submit", got)
	}
}

func TestRunTaskThatCouldNotRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		final    *podiumv1.Task
		events   []*podiumv1.TaskEvent
		quiet    bool
		wantCode int
		wantErr  string
	}{
		{
			name:     "image missing",
			final:    &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "image not found: nope:1"},
			events:   []*podiumv1.TaskEvent{statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "image not found: nope:1", nil, 0)},
			wantCode: 125, wantErr: "→ failed: image not found: nope:1\n",
		},
		{
			name:     "image missing, quiet",
			final:    &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_FAILED, Reason: "image not found: nope:1"},
			events:   []*podiumv1.TaskEvent{statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "image not found: nope:1", nil, 0)},
			quiet:    true,
			wantCode: 125, wantErr: "podium: task task_01TEST failed: image not found: nope:1\n",
		},
		{
			// No event in the log for the end: the printer shows it from
			// the final task.
			name:     "lost, no status event",
			final:    &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_LOST, Reason: "node went offline"},
			wantCode: 125, wantErr: "→ lost: node went offline\n",
		},
		{
			name:     "killed by SIGKILL",
			final:    &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_FAILED, Signal: 9, Reason: "timed out"},
			events:   []*podiumv1.TaskEvent{statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "timed out", nil, 9)},
			wantCode: 137, wantErr: "→ failed: killed by signal 9 (SIGKILL): timed out\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.task = tc.final
			f.events = tc.events
			cli := newTestCLI(nil)
			args := []string{"--server", f.url(), "run", "--image", "nope:1"}
			if tc.quiet {
				args = append(args, "--quiet")
			}
			code := cli.run(t, args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d", code, tc.wantCode)
			}
			if got := cli.errOut.String(); !strings.HasSuffix(got, tc.wantErr) {
				t.Errorf("stderr:\n%s\nshould end with %q", got, tc.wantErr)
			}
			if tc.quiet && strings.Contains(cli.errOut.String(), "→") {
				t.Errorf("--quiet printed progress lines:\n%s", cli.errOut)
			}
		})
	}
}

func TestRunCoordinatorRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		token string
		want  string
	}{
		{"invalid argument", connect.NewError(connect.CodeInvalidArgument, errors.New("spec.labels[0]: bad label")), "",
			"podium: spec.labels[0]: bad label\n"},
		{"unauthenticated, no token", connect.NewError(connect.CodeUnauthenticated, errors.New("no")), "",
			"wants a token and none was given (no): set PODIUM_TOKEN or --token"},
		{"unauthenticated, wrong token", connect.NewError(connect.CodeUnauthenticated, errors.New("bad token")), "wrong",
			"refused the token (bad token): set PODIUM_TOKEN or --token"},
		{"permission denied", connect.NewError(connect.CodePermissionDenied, errors.New("admins only")), "",
			"does not allow this: admins only"},
		{"unavailable", connect.NewError(connect.CodeUnavailable, errors.New("store the task: db down")), "",
			"is unavailable: store the task: db down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.err = tc.err
			cli := newTestCLI(map[string]string{"PODIUM_TOKEN": tc.token})
			code := cli.run(t, "--server", f.url(), "run", "--image", "alpine:3")
			if code != exitPodium {
				t.Errorf("exit %d, want 125", code)
			}
			if !strings.Contains(cli.errOut.String(), tc.want) {
				t.Errorf("stderr:\n%s\nshould contain %q", cli.errOut, tc.want)
			}
		})
	}
}

func TestRunNotFoundWhileFollowing(t *testing.T) {
	f := newFake(t)
	f.eventsFn = func(context.Context, int, *connect.Request[podiumv1.EventsRequest], *connect.ServerStream[podiumv1.EventsResponse]) error {
		return connect.NewError(connect.CodeNotFound, errors.New("gone"))
	}
	tc := newTestCLI(nil)
	if code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3"); code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	if !strings.Contains(tc.errOut.String(), "no task task_01TEST") {
		t.Errorf("stderr:\n%s", tc.errOut)
	}
}

func TestRunHelp(t *testing.T) {
	tc := newTestCLI(map[string]string{"PODIUM_TOKEN": "topsecret"})
	if code := tc.run(t, "run", "--help"); code != 0 {
		t.Errorf("run --help exited %d", code)
	}
	out := tc.out.String()
	for _, want := range []string{"Usage: podium run", "--image IMAGE", "--env KEY=VALUE", "--spec FILE", "--cap-add CAP", "--detach", "Exit code"} {
		if !strings.Contains(out, want) {
			t.Errorf("help should contain %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "topsecret") {
		t.Errorf("help shows the token:\n%s", out)
	}
}

func TestRunExampleSpecWithFlags(t *testing.T) {
	// The shipped examples go through the CLI as they are, and flags still
	// override them.
	o := &runOptions{
		specFile: "../../examples/build.yaml",
		env:      stringList{"REF=my-branch"},
		timeout:  "45m",
		capAdd:   stringList{"CAP_KILL"},
		set:      map[string]bool{"env": true, "timeout": true, "cap-add": true},
	}
	spec, err := o.buildSpec(nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetEnv()["REF"] != "my-branch" || spec.GetEnv()["REPO"] == "" || spec.GetTimeoutSeconds() != 45*60 ||
		spec.GetPriority() != 10 || strings.Join(spec.GetCapabilities(), " ") != "KILL" {
		t.Errorf("buildSpec(build.yaml with flags) = %v", spec)
	}
	o = &runOptions{specFile: "../../examples/with-postgres.yaml", set: map[string]bool{}}
	if spec, err = o.buildSpec(nil); err != nil || spec.GetSidecars()[0].GetName() != "db" {
		t.Errorf("buildSpec(with-postgres.yaml) = %v, %v", spec, err)
	}
}
