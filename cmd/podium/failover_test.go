package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// kill makes the fake vanish the way a SIGKILLed coordinator does: its
// connections drop mid-stream and its port stops answering.
func (f *fake) kill() {
	f.srv.Listener.Close()
	f.srv.CloseClientConnections()
}

// dyingMidFollow makes f serve the first upTo events of every Events call,
// then signal on reached and hold the stream open until it is killed.
func (f *fake) dyingMidFollow(upTo int) (reached <-chan struct{}) {
	ch := make(chan struct{}, 1)
	f.eventsFn = func(ctx context.Context, _ int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
		if err := f.sendLog(s, req.Msg.GetAfterSeq(), upTo); err != nil {
			return err
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return ch
}

// waitPrinted waits until podium has printed want on stdout, after reached
// said the fake served it: bytes in flight when a replica dies are lost with
// it (a reset connection drops what was not read yet), so a test that kills
// one checks afterwards only what podium had already printed.
func waitPrinted(t *testing.T, tc *testCLI, reached <-chan struct{}, done <-chan int, want string) {
	t.Helper()
	select {
	case <-reached:
	case code := <-done:
		t.Fatalf("podium exited %d before the replica served the stream; stderr:\n%s", code, tc.errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for tc.out.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("podium printed %q, want %q; stderr:\n%s", tc.out.String(), want, tc.errOut)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunFailsOverToAnotherReplica follows a task on replica A, kills A mid
// stream, and expects the follower to finish through replica B (the next
// address of --server) with every byte exactly once and the task's own exit
// code: both replicas serve the same log, and the follower resumes after the
// last seq it printed.
func TestRunFailsOverToAnotherReplica(t *testing.T) {
	a, b := newFake(t), newFake(t)
	var want []byte
	var events []*podiumv1.TaskEvent
	for i := range 8 {
		chunk := fmt.Sprintf("line %d\n\x00\xff", i)
		want = append(want, chunk...)
		events = append(events, stdoutEv(chunk))
	}
	events = append(events, statusEv(podiumv1.TaskState_TASK_STATE_FAILED, "", i32(3), 0))
	a.events, b.events = events, events
	b.setTask(func(t *podiumv1.Task) { t.State, t.ExitCode = podiumv1.TaskState_TASK_STATE_FAILED, i32(3) })
	reached := a.dyingMidFollow(4)

	tc := newTestCLI(nil)
	done := make(chan int, 1)
	go func() { done <- tc.run(t, "--server", a.url()+","+b.url(), "run", "--image", "alpine:3") }()
	waitPrinted(t, tc, reached, done, string(want[:len(want)/2]))
	a.kill()
	code := <-done
	if code != 3 {
		t.Fatalf("exit %d, want the task's 3; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.Bytes(); string(got) != string(want) {
		t.Errorf("stdout:\n got %q\nwant %q", got, want)
	}
	if got := fmt.Sprint(b.afters); got != "[4]" {
		t.Errorf("after_seq of the Events calls to replica B = %s, want [4]", got)
	}
	errText := tc.errOut.String()
	if !strings.Contains(errText, "→ lost the event stream") || !strings.Contains(errText, "→ reconnected to "+b.url()) {
		t.Errorf("stderr should tell of the lost stream and the reconnect to B:\n%s", errText)
	}
	if !strings.HasSuffix(errText, "→ failed: exit code 3\n") {
		t.Errorf("stderr should end with the task's end:\n%s", errText)
	}
}

// TestRunGivesUpWhenNoReplicaAnswers kills the only live replica mid-follow:
// the follower must say it is reconnecting, naming the addresses it tries,
// and after --reconnect-timeout exit 125 saying the task's state is unknown
// and how to look at it, instead of hanging.
func TestRunGivesUpWhenNoReplicaAnswers(t *testing.T) {
	a := newFake(t)
	a.events = []*podiumv1.TaskEvent{stdoutEv("before\n"), stdoutEv("more\n"), stdoutEv("never\n")}
	reached := a.dyingMidFollow(2)
	other := closedURL(t)

	tc := newTestCLI(nil)
	tc.reconnectNote = 1 // repeat the line at every try
	done := make(chan int, 1)
	go func() {
		done <- tc.run(t, "--server", a.url()+","+other, "--reconnect-timeout", "1s", "run", "--image", "alpine:3")
	}()
	waitPrinted(t, tc, reached, done, "before\nmore\n")
	a.kill()
	code := <-done
	if code != exitPodium {
		t.Fatalf("exit %d, want 125; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.String(); got != "before\nmore\n" {
		t.Errorf("stdout = %q, want what A served", got)
	}
	errText := tc.errOut.String()
	for _, want := range []string{
		"→ lost the event stream",
		"→ still reconnecting (",
		other,
		a.url(),
		"the state of task task_01TEST is unknown",
		"podium task get task_01TEST",
	} {
		if !strings.Contains(errText, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errText)
		}
	}
}

// TestLogsFollowGivesUpWhenNoReplicaAnswers is the same bound for
// "podium logs -f", set through the environment.
func TestLogsFollowGivesUpWhenNoReplicaAnswers(t *testing.T) {
	a := newFake(t)
	a.events = []*podiumv1.TaskEvent{stdoutEv("before\n")}
	reached := a.dyingMidFollow(1)

	tc := newTestCLI(map[string]string{"PODIUM_SERVER": a.url(), "PODIUM_RECONNECT_TIMEOUT": "500ms"})
	done := make(chan int, 1)
	go func() { done <- tc.run(t, "logs", "-f", "task_01TEST") }()
	waitPrinted(t, tc, reached, done, "before\n")
	a.kill()
	if code := <-done; code != exitPodium {
		t.Fatalf("exit %d, want 125; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.String(); got != "before\n" {
		t.Errorf("stdout = %q", got)
	}
	if errText := tc.errOut.String(); !strings.Contains(errText, "state of task task_01TEST is unknown") {
		t.Errorf("stderr should say the task's state is unknown:\n%s", errText)
	}
}

// TestUnaryCallsFailOver sends a command to a list whose first address is
// dead: the command is answered by the next one.
func TestUnaryCallsFailOver(t *testing.T) {
	b := newFake(t)
	b.setTask(func(t *podiumv1.Task) { t.State = podiumv1.TaskState_TASK_STATE_RUNNING })
	tc := newTestCLI(map[string]string{"PODIUM_SERVER": closedURL(t) + ", " + b.url()})
	if code := tc.run(t, "task", "get", "task_01TEST"); code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, tc.errOut)
	}
	if !strings.Contains(tc.out.String(), "task_01TEST") {
		t.Errorf("stdout should show the task:\n%s", tc.out)
	}
}

// TestUnaryAllDownNamesEveryAddress: when no address answers, the error
// names them all.
func TestUnaryAllDownNamesEveryAddress(t *testing.T) {
	x, y := closedURL(t), closedURL(t)
	tc := newTestCLI(nil)
	if code := tc.run(t, "--server", x+","+y, "tasks"); code != exitPodium {
		t.Fatalf("exit %d, want 125; stderr:\n%s", code, tc.errOut)
	}
	if errText := tc.errOut.String(); !strings.Contains(errText, x) || !strings.Contains(errText, y) {
		t.Errorf("stderr should name both addresses:\n%s", errText)
	}
}

// TestReconnectTimeoutRefused: a bound that is not a positive duration is a
// usage error.
func TestReconnectTimeoutRefused(t *testing.T) {
	tc := newTestCLI(nil)
	if code := tc.run(t, "--reconnect-timeout", "0s", "logs", "task_01TEST"); code != exitUsage {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, tc.errOut)
	}
	tc = newTestCLI(map[string]string{"PODIUM_RECONNECT_TIMEOUT": "soon"})
	if code := tc.run(t, "tasks"); code != exitUsage {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, tc.errOut)
	}
}

// TestReconnectBoundIsPerOutage: a replica that takes the stream back and is
// quiet for longer than --reconnect-timeout (a task printing nothing) and
// then dies too starts a new outage; the follower must not give up at once,
// and finishes through the third replica.
func TestReconnectBoundIsPerOutage(t *testing.T) {
	a, b, c := newFake(t), newFake(t), newFake(t)
	events := []*podiumv1.TaskEvent{stdoutEv("one\n"), stdoutEv("two\n"), statusEv(podiumv1.TaskState_TASK_STATE_SUCCEEDED, "", i32(0), 0)}
	a.events, b.events, c.events = events, events, events
	c.setTask(func(t *podiumv1.Task) { t.State, t.ExitCode = podiumv1.TaskState_TASK_STATE_SUCCEEDED, i32(0) })
	reachedA := a.dyingMidFollow(1)
	const bound = 300 * time.Millisecond
	quietOver := make(chan struct{})
	b.eventsFn = func(ctx context.Context, _ int, _ *connect.Request[podiumv1.EventsRequest], _ *connect.ServerStream[podiumv1.EventsResponse]) error {
		// Quiet for longer than the bound: this is the situation under
		// test, not a wait for something to happen.
		select {
		case <-time.After(2 * bound):
			close(quietOver)
		case <-ctx.Done():
			return ctx.Err()
		}
		<-ctx.Done()
		return ctx.Err()
	}

	tc := newTestCLI(nil)
	done := make(chan int, 1)
	go func() {
		done <- tc.run(t, "--server", a.url()+","+b.url()+","+c.url(), "--reconnect-timeout", bound.String(), "run", "--image", "alpine:3")
	}()
	waitPrinted(t, tc, reachedA, done, "one\n")
	a.kill()
	select {
	case <-quietOver:
	case code := <-done:
		t.Fatalf("podium run exited %d early; stderr:\n%s", code, tc.errOut)
	}
	b.kill()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, tc.errOut)
	}
	if got := tc.out.String(); got != "one\ntwo\n" {
		t.Errorf("stdout = %q, want %q", got, "one\ntwo\n")
	}
	if got := fmt.Sprint(c.afters); got != "[1]" {
		t.Errorf("after_seq of the Events calls to replica C = %s, want [1]", got)
	}
}
