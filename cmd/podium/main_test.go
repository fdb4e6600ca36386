package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   string // substring
		stderr   string // substring
		noStdout bool
	}{
		{"top help", []string{"--help"}, 0, "Usage: podium", "", false},
		{"top help, short", []string{"-h"}, 0, "Commands:", "", false},
		{"help command", []string{"help"}, 0, "token create", "", false},
		{"help run", []string{"help", "run"}, 0, "Usage: podium run", "", false},
		{"help task get", []string{"help", "task", "get"}, 0, "Usage: podium task get", "", false},
		{"help token create", []string{"help", "token", "create"}, 0, "--ttl DURATION", "", false},
		{"help unknown", []string{"help", "frobnicate"}, 2, "", `unknown command "frobnicate"`, true},
		{"no command", nil, 2, "", "Usage: podium", true},
		{"unknown command", []string{"frobnicate"}, 2, "", `podium: unknown command "frobnicate"`, true},
		{"group without subcommand", []string{"task"}, 2, "", "task get, task cancel", true},
		{"group with unknown subcommand", []string{"task", "delete", "x"}, 2, "", `unknown command "delete"`, true},
		{"unknown global flag", []string{"--frob", "tasks"}, 2, "", "flag provided but not defined: -frob", true},
		{"unknown command flag", []string{"tasks", "--frob"}, 2, "", "Usage: podium tasks", true},
		{"logs without id", []string{"logs"}, 2, "", "want exactly one task ID", true},
		{"task get with two ids", []string{"task", "get", "a", "b"}, 2, "", "want exactly one task ID", true},
		{"tasks with an argument", []string{"tasks", "x"}, 2, "", `unexpected argument "x"`, true},
		{"bad state", []string{"tasks", "--state", "sleeping"}, 2, "", `--state "sleeping": want one of queued, scheduled`, true},
		{"bad limit", []string{"tasks", "--limit", "-1"}, 2, "", "--limit -1", true},
		{"token with bad ttl", []string{"token", "create", "--ttl", "10"}, 2, "", "--ttl \"10\" has no unit", true},
		{"token with bad label", []string{"token", "create", "--label", "a b"}, 2, "", "--label: label \"a b\"", true},
		{"bad server for tasks", []string{"--server", "http://", "tasks"}, 2, "", "is not a coordinator URL", true},
		{"help task send", []string{"help", "task", "send"}, 0, "Usage: podium task send ID TEXT...", "", false},
		{"help node label", []string{"help", "node", "label"}, 0, "--remove LABEL", "", false},
		{"top help lists the node commands", []string{"help"}, 0, "node slots", "", false},
		{"node group without subcommand", []string{"node"}, 2, "", "node get, node drain, node undrain, node slots, node label, node rm", true},
		{"task send without id", []string{"task", "send"}, 2, "", "want a task ID and the message TEXT", true},
		{"task send without text", []string{"task", "send", "task_01TEST"}, 2, "", "want the message TEXT after the task ID", true},
		{"task send with empty text", []string{"task", "send", "task_01TEST", ""}, 2, "", "the message TEXT is empty", true},
		{"task send with blank words", []string{"task", "send", "task_01TEST", " ", ""}, 2, "", "the message TEXT is empty", true},
		{"task send too long", []string{"task", "send", "task_01TEST", strings.Repeat("x", maxMessageBytes+1)}, 2, "", "more than the 65536 (64 KiB)", true},
		{"task send with empty stdin", []string{"task", "send", "task_01TEST", "-"}, 2, "", "stdin is empty (or blank): nothing to send", true},
		{"node get without id", []string{"node", "get"}, 2, "", "want exactly one node ID", true},
		{"node drain without id", []string{"node", "drain"}, 2, "", "want exactly one node ID", true},
		{"node undrain with two ids", []string{"node", "undrain", "a", "b"}, 2, "", "want exactly one node ID", true},
		{"node slots without n", []string{"node", "slots", "node_A"}, 2, "", "want a node ID and N", true},
		{"node slots not a number", []string{"node", "slots", "node_A", "many"}, 2, "", `N "many": want a whole number`, true},
		{"node slots negative", []string{"node", "slots", "node_A", "-1"}, 2, "", `N "-1": want a whole number`, true},
		{"node slots fraction", []string{"node", "slots", "node_A", "2.5"}, 2, "", `N "2.5": want a whole number`, true},
		{"node slots too big for int32", []string{"node", "slots", "node_A", "99999999999"}, 2, "", `N "99999999999"`, true},
		{"node label with nothing to change", []string{"node", "label", "node_A"}, 2, "", "nothing to change: give --add LABEL or --remove LABEL", true},
		{"node label without id", []string{"node", "label", "--add", "gpu"}, 2, "", "want exactly one node ID", true},
		{"node label bad label", []string{"node", "label", "node_A", "--add", "a b"}, 2, "", `--add: label "a b"`, true},
		{"node label bad removal", []string{"node", "label", "node_A", "--remove", "=x"}, 2, "", "--remove: label", true},
		{"node label add and remove", []string{"node", "label", "node_A", "--add", "gpu", "--remove", "gpu"}, 2, "", `label "gpu" is both added and removed`, true},
		{"node rm without id", []string{"node", "rm"}, 2, "", "want exactly one node ID", true},
		{"version", []string{"version"}, 0, "podium ", "", false},
		{"--version", []string{"--version"}, 0, "podium ", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
			code := cli.run(t, tc.args...)
			if code != tc.code {
				t.Errorf("podium %v exited %d, want %d; stderr:\n%s", tc.args, code, tc.code, cli.errOut)
			}
			if !strings.Contains(cli.out.String(), tc.stdout) {
				t.Errorf("stdout should contain %q:\n%s", tc.stdout, cli.out)
			}
			if !strings.Contains(cli.errOut.String(), tc.stderr) {
				t.Errorf("stderr should contain %q:\n%s", tc.stderr, cli.errOut)
			}
			if tc.noStdout && cli.out.String() != "" {
				t.Errorf("stdout should be empty on a usage error, got:\n%s", cli.out)
			}
			if code != 0 && len(f.recorded()) != 0 {
				t.Errorf("a usage error sent %v", f.paths())
			}
		})
	}
}

func TestGlobalFlagsAfterTheCommandAndFromTheEnvironment(t *testing.T) {
	f := newFake(t)
	// The environment names a dead server and token; flags after the
	// command override both.
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": closedURL(t), "PODIUM_TOKEN": "env-token"})
	if code := cli.run(t, "tasks", "--server", f.url(), "--token", "flag-token"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.recorded(); len(r) != 1 || r[0].auth != "Bearer flag-token" {
		t.Errorf("requests = %+v, want one with the flag's token", r)
	}

	// A bare host:port means http://host:port; the environment's token is used.
	cli = newTestCLI(map[string]string{"PODIUM_TOKEN": "env-token"})
	if code := cli.run(t, "--server", strings.TrimPrefix(f.url(), "http://"), "nodes"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.recorded(); r[len(r)-1].auth != "Bearer env-token" {
		t.Errorf("last request auth = %q, want the environment's token", r[len(r)-1].auth)
	}

	// No token: no Authorization header at all.
	cli = newTestCLI(nil)
	if code := cli.run(t, "--server", f.url(), "nodes"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if r := f.recorded(); r[len(r)-1].auth != "" {
		t.Errorf("sent Authorization %q without a token", r[len(r)-1].auth)
	}
}

func TestEveryCommandReportsAnUnreachableCoordinator(t *testing.T) {
	url := closedURL(t)
	for _, args := range [][]string{
		{"run", "--image", "alpine:3"},
		{"logs", "task_01X"},
		{"logs", "-f", "task_01X"},
		{"tasks"},
		{"task", "get", "task_01X"},
		{"task", "cancel", "task_01X"},
		{"task", "rerun", "task_01X"},
		{"nodes"},
		{"token", "create"},
		{"task", "send", "task_01X", "hello"},
		{"node", "get", "node_A"},
		{"node", "drain", "node_A"},
		{"node", "undrain", "node_A"},
		{"node", "slots", "node_A", "4"},
		{"node", "label", "node_A", "--add", "gpu"},
		{"node", "rm", "node_A"},
		{"registry", "ls"},
		{"registry", "rm", "ghcr.io"},
		{"webhook", "add", "https://hooks.example.com/x"},
		{"webhook", "ls"},
		{"webhook", "rm", "hook_01X"},
	} {
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": url})
		code := cli.run(t, args...)
		if code != exitPodium {
			t.Errorf("podium %v exited %d, want 125", args, code)
		}
		want := "podium: cannot reach the coordinator at " + url + ": "
		if !strings.HasPrefix(cli.errOut.String(), want) || !strings.Contains(cli.errOut.String(), "set --server or PODIUM_SERVER") {
			t.Errorf("podium %v: stderr:\n%s\nwant it to start with %q", args, cli.errOut, want)
		}
	}
}

func TestLogs(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_FAILED
	f.task.ExitCode = i32(3)
	f.events = []*podiumv1.TaskEvent{
		stdoutEv("out\x00bin"), stderrEv("err\n"), statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(3), 0),
	}
	var follows []bool
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		follows = append(follows, req.Msg.GetFollow())
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), len(f.events)); err != nil {
			return err
		}
		return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
	}
	for _, args := range [][]string{{"logs", "task_01TEST"}, {"logs", "task_01TEST", "-f"}} {
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
		// logs reports on itself: 0 although the task exited 3.
		if code := cli.run(t, args...); code != 0 {
			t.Errorf("podium %v exited %d, want 0; stderr:\n%s", args, code, cli.errOut)
		}
		if cli.out.String() != "out\x00bin" {
			t.Errorf("podium %v: stdout = %q", args, cli.out)
		}
		if want := "err\n→ failed: exit code 3\n"; cli.errOut.String() != want {
			t.Errorf("podium %v: stderr = %q, want %q", args, cli.errOut, want)
		}
	}
	if fmt.Sprint(follows) != "[false true]" {
		t.Errorf("follow of the Events calls = %v, want [false true]", follows)
	}

	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "logs", "--quiet", "task_01TEST"); code != 0 || cli.errOut.String() != "err\n" {
		t.Errorf("logs --quiet: exit %d, stderr %q, want only the task's stderr", code, cli.errOut)
	}
}

func TestLogsOfAnUnknownTask(t *testing.T) {
	f := newFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "logs", "task_01NOPE"); code != exitUsage {
		t.Errorf("exit %d, want 2: a task that does not exist is the caller's mistake", code)
	}
	if cli.errOut.String() != "podium: no task task_01NOPE\n" {
		t.Errorf("stderr = %q", cli.errOut)
	}
}

func TestLogsGivesUpWhenCatchingUpKeepsFailing(t *testing.T) {
	f := newFake(t)
	f.eventsFn = func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		if call == 1 {
			// Reached once, then broken for good.
			if err := s.Send(&podiumv1.EventsResponse{Seq: 1, Event: stdoutEv("a")}); err != nil {
				return err
			}
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("db down"))
	}
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "logs", "task_01TEST"); code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	// The first call reached the coordinator, so it is retried; after
	// maxCatchUpFailures failures in a row, logs gives up.
	if len(f.afters) != maxCatchUpFailures {
		t.Errorf("%d Events calls, want %d", len(f.afters), maxCatchUpFailures)
	}
	if !strings.Contains(cli.errOut.String(), "db down") {
		t.Errorf("stderr:\n%s", cli.errOut)
	}
}

func sampleTasks(now time.Time) []*podiumv1.Task {
	return []*podiumv1.Task{
		{
			Id: "task_01B", State: podiumv1.TaskState_TASK_STATE_RUNNING, NodeId: "node_A", Attempt: 1,
			Spec:      &podiumv1.TaskSpec{Name: "unit-tests", Image: "alpine:3", Command: []string{"sh", "-c", "echo 'hi'; exit 3"}, Env: map[string]string{"SECRET": "hunter2", "A": "1"}, Labels: []string{"linux"}, TimeoutSeconds: 600, Resources: &podiumv1.Resources{Cpu: 0.5, MemoryMb: 64}},
			CreatedAt: timestamppb.New(now.Add(-90 * time.Second)), StartedAt: timestamppb.New(now.Add(-80 * time.Second)),
		},
		{
			Id: "task_01A", State: podiumv1.TaskState_TASK_STATE_QUEUED, Reason: "no node has\nthe label gpu",
			Spec:      &podiumv1.TaskSpec{Image: "busybox"},
			CreatedAt: timestamppb.New(now.Add(-3 * time.Hour)),
		},
	}
}

func TestTasks(t *testing.T) {
	f := newFake(t)
	f.tasks = sampleTasks(time.Now())
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "tasks", "--state", "running,queued", "--state", "running", "--limit", "5"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	lines := strings.Split(strings.TrimRight(cli.out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", cli.out)
	}
	for i, want := range [][]string{
		{"ID", "NAME", "STATE", "IMAGE", "NODE", "AGE", "REASON"},
		{"task_01B", "unit-tests", "running", "alpine:3", "node_A", "1m", "-"},
		{"task_01A", "-", "queued", "busybox", "-", "3h", "no", "node", "has", "the", "label", "gpu"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], want)
		}
	}
	if got := fmt.Sprint(f.listReq.GetStates(), f.listReq.GetLimit()); got != "[TASK_STATE_RUNNING TASK_STATE_QUEUED] 5" {
		t.Errorf("List request = %s", got)
	}

	// --name is sent as the name filter; a name that is no name sends nothing.
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "tasks", "--name", "unit-tests"); code != 0 || f.listReq.GetName() != "unit-tests" {
		t.Errorf("tasks --name unit-tests: exit %d, request name %q; stderr:\n%s", code, f.listReq.GetName(), cli.errOut)
	}
	f.listReq = nil
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "tasks", "--name", "unit tests"); code != exitUsage || f.listReq != nil ||
		!strings.Contains(cli.errOut.String(), `--name "unit tests" is not a task name`) {
		t.Errorf("tasks --name 'unit tests': exit %d, request %v; stderr:\n%s", code, f.listReq, cli.errOut)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "tasks", "--json"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(cli.out.String()), &got); err != nil {
		t.Fatalf("--json output is not a JSON array: %v\n%s", err, cli.out)
	}
	if len(got) != 2 || got[0]["id"] != "task_01B" || got[0]["node_id"] != "node_A" || got[0]["state"] != "running" || got[1]["state"] != "queued" {
		t.Errorf("--json = %v, want the states as --state takes them (running, queued)", got)
	}
	// Numbers are numbers (protojson would write "64"), times RFC 3339.
	if len(got) == 2 {
		res, _ := got[0]["spec"].(map[string]any)["resources"].(map[string]any)
		if res["memory_mb"] != float64(64) || res["cpu"] != 0.5 {
			t.Errorf("--json resources = %v, want memory_mb and cpu as JSON numbers", res)
		}
		if at, ok := got[0]["created_at"].(string); !ok {
			t.Errorf("--json created_at = %v, want an RFC 3339 string", got[0]["created_at"])
		} else if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
			t.Errorf("--json created_at = %q: %v", at, err)
		}
	}

	// No tasks: an empty array, not null.
	f.tasks = nil
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "tasks", "--json"); code != 0 || cli.out.String() != "[]\n" {
		t.Errorf("exit %d, stdout %q, want []", code, cli.out)
	}
}

func TestTaskGet(t *testing.T) {
	f := newFake(t)
	f.task = sampleTasks(time.Now())[0]
	f.task.Id = "task_01TEST"
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "get", "task_01TEST"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	out := cli.out.String()
	for _, want := range []string{
		"id:", "task_01TEST", "state:", "running", "node:", "node_A", "image:", "alpine:3",
		`command:`, `sh -c 'echo '\''hi'\''; exit 3'`, "env:", "A, SECRET (values not shown)",
		"timeout:", "10m0s", "resources:", "cpu 0.5, memory 64 MiB", "(1m ago)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("task get should show %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("task get shows an env value:\n%s", out)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "get", "--json", "task_01TEST"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(cli.out.String()), &obj); err != nil || obj["id"] != "task_01TEST" {
		t.Errorf("--json = %v (%v):\n%s", obj, err, cli.out)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "get", "task_01NOPE"); code != exitUsage || cli.errOut.String() != "podium: no task task_01NOPE\n" {
		t.Errorf("unknown task: exit %d (want 2, a usage error), stderr %q", code, cli.errOut)
	}
}

func TestTaskCancel(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_RUNNING
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "cancel", "task_01TEST", "--reason", "wrong input"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if len(f.cancels) != 1 || f.cancels[0].GetReason() != "wrong input" {
		t.Errorf("Cancel requests = %v", f.cancels)
	}
	if !strings.Contains(cli.out.String(), "task task_01TEST is being cancelled") {
		t.Errorf("stdout = %q", cli.out)
	}

	f.task.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "cancel", "task_01TEST"); code != 0 || !strings.Contains(cli.out.String(), "had already ended (succeeded)") {
		t.Errorf("exit %d, stdout %q", code, cli.out)
	}
	if f.cancels[1].GetReason() == "" {
		t.Errorf("cancel without --reason sent no reason")
	}
}

func TestNodes(t *testing.T) {
	f := newFake(t)
	now := time.Now()
	f.nodes = []*podiumv1.Node{
		{Id: "node_A", Hostname: "box1", Status: podiumv1.NodeStatus_NODE_STATUS_ONLINE, Labels: []string{"linux", "gpu=a100"},
			RunningTasks: 2, FreeSlots: 6, LastHeartbeatAt: timestamppb.New(now.Add(-5 * time.Second)), AllowPrivilegedSidecars: true,
			Gpus: []*podiumv1.Gpu{
				{Index: 0, Uuid: "GPU-a", Model: "NVIDIA A100-SXM4-40GB", MemoryMb: 40960},
				{Index: 1, Uuid: "GPU-b", Model: "NVIDIA A100-SXM4-40GB", MemoryMb: 40960},
				{Index: 2, Uuid: "GPU-c", Model: "Tesla T4", MemoryMb: 15360},
			}},
		{Id: "node_B", Hostname: "box2", Status: podiumv1.NodeStatus_NODE_STATUS_OFFLINE, Draining: true, AgentVersion: "v1.2.0"},
	}
	f.coordinatorVersion = "v1.3.0"
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "nodes"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	lines := strings.Split(strings.TrimRight(cli.out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", cli.out)
	}
	for i, want := range []string{
		"ID HOSTNAME VERSION STATUS DRAINING LABELS PRIVILEGED RUNNING FREE SLOTS GPUS LAST HEARTBEAT",
		"node_A box1 - online no linux,gpu=a100 yes 2 6 2× NVIDIA A100-SXM4-40GB (40960 MiB), 1× Tesla T4 (15360 MiB) 5s ago",
		"node_B box2 v1.2.0 (older) offline yes - no 0 0 - never",
	} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want {
			t.Errorf("line %d = %q, want %q", i, got, want)
		}
	}
	if !strings.Contains(cli.errOut.String(), "1 node(s) run an agent older than the coordinator (v1.3.0)") {
		t.Errorf("podium nodes did not say one node is older than the coordinator; stderr:\n%s", cli.errOut)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "nodes", "--json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(cli.out.String()), &got); err != nil || len(got) != 2 || got[0]["free_slots"] != float64(6) {
		t.Errorf("--json = %v (%v)", got, err)
	}
}

func TestTokenCreate(t *testing.T) {
	f := newFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "token", "create", "--label", "linux", "--label", "gpu=a100", "--ttl", "30m"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	// Only the token on stdout, so that T=$(podium token create) works.
	if cli.out.String() != "tok_secret\n" {
		t.Errorf("stdout = %q, want only the token", cli.out)
	}
	if got := fmt.Sprint(f.tokenReq.GetLabels(), f.tokenReq.GetTtlSeconds()); got != "[linux gpu=a100] 1800" {
		t.Errorf("request = %s", got)
	}
	if !strings.Contains(cli.errOut.String(), "linux, gpu=a100") {
		t.Errorf("stderr should tell the labels:\n%s", cli.errOut)
	}
}

func TestHTTP1OnlyServer(t *testing.T) {
	// A server that does not speak HTTP/2 without TLS is not a coordinator;
	// say so rather than show an HTTP/2 framing error.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	cli := newTestCLI(nil)
	if code := cli.run(t, "--server", srv.URL, "tasks"); code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	// Which message the user gets depends on whether the HTTP/1.1 server's
	// answer or its closing the connection reaches the client first; both say
	// the coordinator is not usable at that address.
	if e := cli.errOut.String(); !strings.Contains(e, "speaks only HTTP/1.1") && !strings.Contains(e, "is unavailable") {
		t.Errorf("stderr:\n%s", e)
	}
}

// connect reports a request whose connection the server broke while it was
// being written (broken pipe, reset) as Canceled, the code it also uses for
// the person's own Ctrl-C. Only the latter is an interruption; the former
// is a coordinator that is not answering as one, and says so. (An HTTP/1.1
// server closing on the HTTP/2 preface made TestHTTP1OnlyServer print
// "interrupted" about one run in four.)
func TestCanceledIsAnInterruptOnlyWhenTheContextWas(t *testing.T) {
	broken := connect.NewError(connect.CodeCanceled, &url.Error{Op: "Post", URL: "http://127.0.0.1:7070/podium.v1.TaskService/List",
		Err: &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}})
	got := describeAt("http://127.0.0.1:7070", true, broken, "")
	if strings.Contains(got, "interrupted") || !strings.Contains(got, "is unavailable") || !strings.Contains(got, "broken pipe") {
		t.Errorf("a broken pipe reads %q; want the coordinator unavailable, naming the broken pipe", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	interrupted := connect.NewError(connect.CodeCanceled, ctx.Err())
	if got := describeAt("http://127.0.0.1:7070", true, interrupted, ""); got != "interrupted" {
		t.Errorf("a cancelled context reads %q; want interrupted", got)
	}
}

// A command's help lists its own flags; the global ones are explained once,
// by podium help, and each command's help points there instead of repeating
// them.
func TestCommandHelpLeavesGlobalFlagsToTopHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "user", "add"}, {"user", "add", "--help"}, {"help", "run"}} {
		tc := newTestCLI(nil)
		if code := tc.run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		help := tc.out.String()
		for _, g := range []string{"--reconnect-timeout", "--ca-file FILE", "--server URL", "--token TOKEN"} {
			if strings.Contains(help, "  "+g) {
				t.Errorf("%v lists the global flag %s:\n%s", args, g, help)
			}
		}
		if !strings.Contains(help, "Global flags (--server, --token, --ca-file, --reconnect-timeout): see podium help.") {
			t.Errorf("%v does not point at podium help for the global flags:\n%s", args, help)
		}
	}
	tc := newTestCLI(nil)
	if code := tc.run(t, "help"); code != 0 || !strings.Contains(tc.out.String(), "--reconnect-timeout D") {
		t.Errorf("podium help (exit %d) does not explain the global flags:\n%s", code, tc.out.String())
	}
}
