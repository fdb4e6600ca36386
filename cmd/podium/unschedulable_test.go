package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// simNode enrolls a node on r and holds its stream with capa, speaking the
// node protocol as the agent does: every assignment it is given it accepts
// (provisioning), so the task holds its slot. It runs until the test ends.
func simNode(t *testing.T, ctx context.Context, r *coordtest.Replica, capa *podiumv1.Capacity) {
	t.Helper()
	tok, err := r.Admin().CreateEnrollmentToken(ctx, connect.NewRequest(&podiumv1.CreateEnrollmentTokenRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	en, err := r.NodeClient().Enroll(ctx, connect.NewRequest(&podiumv1.EnrollRequest{Token: tok.Msg.GetToken(), Hostname: "sim"}))
	if err != nil {
		t.Fatal(err)
	}
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: en.Msg.GetNodeId(), NodeKey: en.Msg.GetNodeKey(), Hostname: "sim", Capacity: capa}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			if a := m.GetAssign(); a != nil {
				_ = st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Events{Events: &podiumv1.EventBatch{Events: []*podiumv1.TaskEvent{{
					TaskId: a.GetTaskId(), Attempt: a.GetAttempt(), Seq: 1,
					Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: podiumv1.TaskState_TASK_STATE_PROVISIONING}}}}}}})
			}
		}
	}()
}

// On a real coordinator with one 24 GB node of one slot: a task no node
// could ever run says so in podium task get ("unschedulable", "cannot run
// on any node") and in podium run's progress, and a queue timeout fails it
// with that reason, podium run exiting 125; a task that merely waits for
// the slot is never called unschedulable, and its queue timeout says it
// waited for a slot. The coordinator's --queue-timeout applies to a task
// whose spec gives none.
func TestUnschedulableAndQueueTimeoutThroughTheCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{QueueTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	simNode(t, ctx, r, &podiumv1.Capacity{CpuCores: 8, MemoryMb: 23456, MaxTasks: 1})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	huge := writeFile(t, "huge.yaml", "image: busybox\nresources:\n  memory_mb: 900000\n")
	const never = "cannot run on any node: it asks 900,000 MiB of memory (its sidecars' included) and the largest node has 23,456 MiB; " +
		"lower resources.memory_mb or enroll a bigger node"

	// (a) Never fits: task get says so, and the coordinator's queue timeout
	// applies.
	code, out, errOut := podium("run", "--detach", "--spec", huge)
	if code != 0 {
		t.Fatalf("podium run --detach: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	wait.For(t, 30*time.Second, "task get to say the task cannot run on any node", func() bool {
		code, out, _ := podium("task", "get", id)
		return code == 0 && strings.Contains(out, "state:") && strings.Contains(out, "queued, unschedulable: no node could ever run it") &&
			strings.Contains(out, never)
	})
	_, out, _ = podium("task", "get", id)
	if !strings.Contains(out, "queue timeout:") || !strings.Contains(out, "1h0m0s (the coordinator's --queue-timeout); fails at ") {
		t.Errorf("task get of a task under the coordinator's --queue-timeout 1h:\n%s", out)
	}
	if strings.Contains(out, "0 CPU") || strings.Contains(out, " MB ") {
		t.Errorf("task get says 0 CPU or MB:\n%s", out)
	}
	if _, out, _ := podium("task", "get", "--json", id); !strings.Contains(out, `"unschedulable": true`) {
		t.Errorf("task get --json lacks unschedulable:\n%s", out)
	}

	// (c) Waiting for the slot is not unschedulable.
	code, out, errOut = podium("run", "--detach", "--image", "busybox")
	if code != 0 {
		t.Fatalf("podium run --detach: exit %d: %s", code, errOut)
	}
	holder := strings.TrimSpace(out)
	wait.For(t, 30*time.Second, "the first task to hold the node's slot", func() bool {
		_, out, _ := podium("task", "get", holder)
		return strings.Contains(out, "state:") && strings.Contains(out, "provisioning")
	})
	code, out, errOut = podium("run", "--detach", "--image", "busybox")
	if code != 0 {
		t.Fatalf("podium run --detach: exit %d: %s", code, errOut)
	}
	waiter := strings.TrimSpace(out)
	wait.For(t, 30*time.Second, "the second task to wait for the slot", func() bool {
		_, out, _ := podium("task", "get", waiter)
		return strings.Contains(out, "every node that could run the task is busy: it waits for a free slot")
	})
	if _, out, _ := podium("task", "get", waiter); strings.Contains(out, "unschedulable") || strings.Contains(out, "cannot run") {
		t.Errorf("a task waiting for a slot is called unschedulable:\n%s", out)
	}

	// (b) A queue timeout fails a never-fitting task with its reason; podium
	// run shows it unschedulable while it waits and exits 125.
	start := time.Now()
	code, _, errOut = podium("run", "--queue-timeout", "3s", "--spec", huge)
	if code != exitPodium {
		t.Errorf("podium run --queue-timeout 3s of a task no node can run: exit %d, want %d:\n%s", code, exitPodium, errOut)
	}
	for _, want := range []string{"→ unschedulable: " + never,
		"→ failed: waited 3s in the queue without a node (queue_timeout); the last reason: " + never} {
		if !strings.Contains(errOut, want) {
			t.Errorf("podium run's stderr lacks %q:\n%s", want, errOut)
		}
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("the task failed %s after it was submitted, before its queue timeout", took)
	}

	// And one waiting for the slot fails saying so, never unschedulable.
	code, _, errOut = podium("run", "--queue-timeout", "2s", "--image", "busybox")
	if code != exitPodium || !strings.Contains(errOut, "→ failed: waited 2s in the queue without a node (queue_timeout); the last reason: "+
		"every node that could run the task is busy: it waits for a free slot") || strings.Contains(errOut, "unschedulable") {
		t.Errorf("podium run --queue-timeout 2s of a task waiting for a slot: exit %d:\n%s", code, errOut)
	}
	code, out, _ = podium("task", "get", id)
	if code != 0 || !strings.Contains(out, "queued, unschedulable") {
		t.Errorf("the first task, under the coordinator's 1h, is no longer queued:\n%s", out)
	}
}

// --queue-timeout reaches the spec over the file's queue_timeout; one that
// is no duration is refused before anything is sent.
func TestRunQueueTimeoutFlag(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	spec := writeFile(t, "task.yaml", "image: alpine:3\nqueue_timeout: 1h\n")
	tc := newTestCLI(nil)
	if code := tc.run(t, "--server", f.url(), "run", "--spec", spec, "--queue-timeout", "90s", "--", "true"); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, tc.errOut)
	}
	if got := f.spec.GetQueueTimeoutSeconds(); got != 90 {
		t.Errorf("submitted queue_timeout_seconds %d, want 90", got)
	}
	for arg, want := range map[string]string{"10": `--queue-timeout "10" has no unit`, "-1m": "negative", "9000h": "a year"} {
		f := newFake(t)
		tc := newTestCLI(nil)
		if code := tc.run(t, "--server", f.url(), "run", "--image", "alpine:3", "--queue-timeout", arg, "--", "true"); code != exitPodium ||
			!strings.Contains(tc.errOut.String(), want) || f.spec != nil {
			t.Errorf("--queue-timeout %s: exit %d, %q, submitted %v; want 125 saying %q, nothing sent", arg, code, tc.errOut, f.spec, want)
		}
	}
}
