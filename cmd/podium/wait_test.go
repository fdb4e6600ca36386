package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// waitFake is an in-test coordinator holding many tasks, for podium wait:
// Get answers for each, and a following Events stream sends a task's final
// state once the test ends it, as the coordinator's does.
type waitFake struct {
	podiumv1connect.UnimplementedTaskServiceHandler
	srv *httptest.Server

	mu      sync.Mutex
	tasks   map[string]*podiumv1.Task
	changed chan struct{} // closed, and replaced, when a task changes
	gets    int
	follows []*podiumv1.EventsRequest
	// broken, when set, is the first follow's answer, as a coordinator
	// that goes away mid-stream gives.
	broken error
}

func newWaitFake(t *testing.T, tasks ...*podiumv1.Task) *waitFake {
	t.Helper()
	f := &waitFake{tasks: map[string]*podiumv1.Task{}, changed: make(chan struct{})}
	for _, task := range tasks {
		f.tasks[task.GetId()] = task
	}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewTaskServiceHandler(f))
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.Config.Protocols = new(http.Protocols)
	f.srv.Config.Protocols.SetHTTP1(true)
	f.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *waitFake) Get(_ context.Context, req *connect.Request[podiumv1.GetRequest]) (*connect.Response[podiumv1.GetResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	t, ok := f.tasks[req.Msg.GetId()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	return connect.NewResponse(&podiumv1.GetResponse{Task: proto.Clone(t).(*podiumv1.Task)}), nil
}

func (f *waitFake) Events(ctx context.Context, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
	f.mu.Lock()
	f.follows = append(f.follows, req.Msg)
	broken := f.broken
	f.broken = nil
	f.mu.Unlock()
	if broken != nil {
		return broken
	}
	for {
		f.mu.Lock()
		t, ok := f.tasks[req.Msg.GetId()]
		var final *podiumv1.Task
		if ok && terminal(t.GetState()) {
			final = proto.Clone(t).(*podiumv1.Task)
		}
		changed := f.changed
		f.mu.Unlock()
		switch {
		case !ok:
			return connect.NewError(connect.CodeNotFound, errors.New("no such task"))
		case final != nil:
			return s.Send(&podiumv1.EventsResponse{Task: final})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// end moves a task to how it ended, waking the streams following it.
func (f *waitFake) end(id string, fn func(*podiumv1.Task)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.tasks[id])
	close(f.changed)
	f.changed = make(chan struct{})
}

// following reports whether a following Events stream has asked for id.
func (f *waitFake) following(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.follows {
		if r.GetId() == id && r.GetFollow() {
			return true
		}
	}
	return false
}

func (f *waitFake) calls() (gets, follows int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, len(f.follows)
}

func waitTask(state podiumv1.TaskState, set ...func(*podiumv1.Task)) *podiumv1.Task {
	t := &podiumv1.Task{Id: ids.New("task"), State: state}
	for _, s := range set {
		s(t)
	}
	return t
}

func exited(code int32) func(*podiumv1.Task) {
	return func(t *podiumv1.Task) { t.ExitCode = i32(code) }
}

var (
	stSucceeded = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	stFailed    = podiumv1.TaskState_TASK_STATE_FAILED
	stCancelled = podiumv1.TaskState_TASK_STATE_CANCELLED
	stLost      = podiumv1.TaskState_TASK_STATE_LOST
	stRunning   = podiumv1.TaskState_TASK_STATE_RUNNING
)

// podium wait blocks on running tasks, following each one's event stream
// from where its log is (not polling, not reading the log again), prints how
// each ended in the order given, and exits with the worst code: here a
// failure's exit code, which beats a cancel.
func TestWaitBlocksUntilEveryTaskEndsAndExitsWithTheWorstCode(t *testing.T) {
	t.Parallel()
	done := waitTask(stSucceeded)
	fails := waitTask(stRunning, func(t *podiumv1.Task) { t.LastSeq = 42 })
	stopped := waitTask(stRunning)
	f := newWaitFake(t, done, fails, stopped)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.srv.URL})
	result := make(chan int, 1)
	go func() { result <- cli.run(t, "wait", done.GetId(), fails.GetId(), stopped.GetId(), done.GetId()) }()

	wait.For(t, 30*time.Second, "podium wait to follow the first running task", func() bool { return f.following(fails.GetId()) })
	select {
	case code := <-result:
		t.Fatalf("podium wait returned %d with two tasks still running; stdout:\n%s", code, cli.out)
	default:
	}
	f.end(fails.GetId(), func(t *podiumv1.Task) { t.State, t.ExitCode = stFailed, i32(3) })
	wait.For(t, 30*time.Second, "podium wait to follow the second running task", func() bool { return f.following(stopped.GetId()) })
	select {
	case code := <-result:
		t.Fatalf("podium wait returned %d with a task still running; stdout:\n%s", code, cli.out)
	default:
	}
	f.end(stopped.GetId(), func(t *podiumv1.Task) { t.State, t.Reason = stCancelled, "cancelled by alice" })

	if code := wait.Recv(t, 30*time.Second, "podium wait to return", result); code != 3 {
		t.Errorf("exit %d, want 3 (the failed task's exit code beats the cancel); stderr:\n%s", code, cli.errOut)
	}
	want := done.GetId() + " succeeded\n" +
		fails.GetId() + " failed: exit code 3\n" +
		stopped.GetId() + " cancelled: cancelled by alice\n"
	if got := cli.out.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
	gets, follows := f.calls()
	if gets != 3 || follows != 2 {
		t.Errorf("%d Get and %d Events calls, want 3 (one per task, the repeated ID once) and 2 (one per running task)", gets, follows)
	}
	f.mu.Lock()
	if after := f.follows[0].GetAfterSeq(); after != 42 {
		t.Errorf("followed the first task after seq %d, want 42 (its log is not read again)", after)
	}
	f.mu.Unlock()
}

// The worst code of tasks that have all ended: see podium wait's help.
func TestWaitWorstCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tasks []*podiumv1.Task
		code  int
	}{
		{"all succeeded", []*podiumv1.Task{waitTask(stSucceeded), waitTask(stSucceeded)}, exitOK},
		{"a cancel", []*podiumv1.Task{waitTask(stSucceeded), waitTask(stCancelled)}, exitCancel},
		{"a failure beats a cancel", []*podiumv1.Task{waitTask(stCancelled), waitTask(stFailed, exited(3))}, 3},
		{"the first failure in the order given", []*podiumv1.Task{waitTask(stFailed, exited(7)), waitTask(stFailed, exited(3))}, 7},
		{"a signal", []*podiumv1.Task{waitTask(stSucceeded), waitTask(stFailed, func(t *podiumv1.Task) { t.Signal = 9 })}, 137},
		{"a lost task beats a failure", []*podiumv1.Task{waitTask(stFailed, exited(3)), waitTask(stLost)}, exitPodium},
		{"a failure without an exit code is Podium's", []*podiumv1.Task{waitTask(stCancelled), waitTask(stFailed)}, exitPodium},
	} {
		f := newWaitFake(t, tc.tasks...)
		cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.srv.URL})
		var args []string
		for _, task := range tc.tasks {
			args = append(args, task.GetId())
		}
		if code := cli.run(t, append([]string{"wait"}, args...)...); code != tc.code {
			t.Errorf("%s: exit %d, want %d; stdout:\n%s", tc.name, code, tc.code, cli.out)
		}
		if _, follows := f.calls(); follows != 0 {
			t.Errorf("%s: %d Events calls for tasks that had ended, want none", tc.name, follows)
		}
	}
}

// Bad input is refused before anything is sent; an unknown task before
// anything is waited for.
func TestWaitRefusesBadInput(t *testing.T) {
	t.Parallel()
	r := waitTask(stRunning)
	f := newWaitFake(t, r)
	env := map[string]string{"PODIUM_SERVER": f.srv.URL}
	tooMany := make([]string, maxWaitTasks+1)
	for i := range tooMany {
		tooMany[i] = ids.New("task")
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no IDs", nil, "give the IDs of the tasks to wait for"},
		{"not a task ID", []string{r.GetId(), "node_01X"}, `"node_01X" is not a task ID`},
		{"too many", tooMany, "1001 task IDs is more than 1000: wait for them in batches"},
	} {
		cli := newTestCLI(env)
		if code := cli.run(t, append([]string{"wait"}, tc.args...)...); code != exitUsage {
			t.Errorf("%s: exit %d, want %d", tc.name, code, exitUsage)
		}
		if !strings.Contains(cli.errOut.String(), tc.stderr) {
			t.Errorf("%s: stderr:\n%s\nwant %q", tc.name, cli.errOut, tc.stderr)
		}
	}
	if gets, follows := f.calls(); gets+follows != 0 {
		t.Errorf("refused input sent %d requests", gets+follows)
	}

	unknown := ids.New("task")
	cli := newTestCLI(env)
	if code := cli.run(t, "wait", r.GetId(), unknown); code != exitPodium {
		t.Errorf("an unknown task: exit %d, want %d", code, exitPodium)
	}
	if want := "no task " + unknown + "; nothing was waited for"; !strings.Contains(cli.errOut.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", cli.errOut, want)
	}
	if _, follows := f.calls(); follows != 0 {
		t.Errorf("waited (%d Events calls) although a task was unknown", follows)
	}
}

// A coordinator that cannot be reached is reported as for every command, 125.
func TestWaitReportsAnUnreachableCoordinator(t *testing.T) {
	t.Parallel()
	url := closedURL(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": url})
	if code := cli.run(t, "wait", ids.New("task")); code != exitPodium {
		t.Errorf("exit %d, want %d", code, exitPodium)
	}
	if want := "podium: cannot reach the coordinator at " + url + ": "; !strings.HasPrefix(cli.errOut.String(), want) {
		t.Errorf("stderr:\n%s\nwant it to start with %q", cli.errOut, want)
	}
}

// A stream that breaks (a coordinator restarting) is followed again, and the
// task's end still decides the code.
func TestWaitRidesOutABrokenStream(t *testing.T) {
	t.Parallel()
	r := waitTask(stRunning)
	f := newWaitFake(t, r)
	f.broken = connect.NewError(connect.CodeUnavailable, errors.New("coordinator shutting down"))
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.srv.URL})
	result := make(chan int, 1)
	go func() { result <- cli.run(t, "wait", r.GetId()) }()
	wait.For(t, 30*time.Second, "podium wait to follow the task again after the stream broke", func() bool {
		_, follows := f.calls()
		return follows >= 2
	})
	f.end(r.GetId(), func(t *podiumv1.Task) { t.State, t.Signal = stFailed, 9 })
	if code := wait.Recv(t, 30*time.Second, "podium wait to return", result); code != 137 {
		t.Errorf("exit %d, want 137 (killed by signal 9); stderr:\n%s", code, cli.errOut)
	}
	if want := r.GetId() + " failed: killed by signal 9 (SIGKILL)\n"; cli.out.String() != want {
		t.Errorf("stdout %q, want %q", cli.out, want)
	}
}
