package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// fake is an in-test coordinator speaking the real Connect API over real
// HTTP/2 without TLS, so the CLI is exercised through its real transport. It
// records every request that reaches it, which is how tests prove that input
// refused locally sent nothing.
type fake struct {
	podiumv1connect.UnimplementedTaskServiceHandler
	podiumv1connect.UnimplementedAdminServiceHandler

	srv *httptest.Server

	mu       sync.Mutex
	requests []recorded
	spec     *podiumv1.TaskSpec
	cancels  []*podiumv1.CancelRequest
	listReq  *podiumv1.ListRequest
	tokenReq *podiumv1.CreateEnrollmentTokenRequest
	afters   []uint64 // after_seq of each Events call

	// task is what Submit, Get and Cancel return (Submit fills in the spec).
	task *podiumv1.Task
	// events is the task's log; events[i] has seq i+1.
	events []*podiumv1.TaskEvent
	// events, when set, replaces the default Events behaviour.
	eventsFn func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error
	// err, when set, is returned by every unary call.
	err      error
	tasks    []*podiumv1.Task
	nodes    []*podiumv1.Node
	cancelFn func(*podiumv1.CancelRequest)
}

type recorded struct {
	path, auth, proto string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	f := &fake{task: &podiumv1.Task{Id: "task_01TEST", State: podiumv1.TaskState_TASK_STATE_QUEUED}}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewTaskServiceHandler(f))
	mux.Handle(podiumv1connect.NewAdminServiceHandler(f))
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, recorded{path: r.URL.Path, auth: r.Header.Get("Authorization"), proto: r.Proto})
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	// The coordinator serves HTTP/1.1 and h2c on one port; so does the fake.
	f.srv.Config.Protocols = new(http.Protocols)
	f.srv.Config.Protocols.SetHTTP1(true)
	f.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) url() string { return f.srv.URL }

func (f *fake) recorded() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.requests...)
}

func (f *fake) paths() []string {
	var p []string
	for _, r := range f.recorded() {
		p = append(p, r.path)
	}
	return p
}

func (f *fake) currentTask() *podiumv1.Task {
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.Clone(f.task).(*podiumv1.Task)
}

func (f *fake) setTask(fn func(t *podiumv1.Task)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.task)
}

func (f *fake) Submit(_ context.Context, req *connect.Request[podiumv1.SubmitRequest]) (*connect.Response[podiumv1.SubmitResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	f.spec = req.Msg.GetSpec()
	f.task.Spec = req.Msg.GetSpec()
	f.mu.Unlock()
	return connect.NewResponse(&podiumv1.SubmitResponse{Task: f.currentTask()}), nil
}

func (f *fake) Get(_ context.Context, req *connect.Request[podiumv1.GetRequest]) (*connect.Response[podiumv1.GetResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	if req.Msg.GetId() != f.currentTask().GetId() {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	return connect.NewResponse(&podiumv1.GetResponse{Task: f.currentTask()}), nil
}

func (f *fake) List(_ context.Context, req *connect.Request[podiumv1.ListRequest]) (*connect.Response[podiumv1.ListResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	f.listReq = req.Msg
	f.mu.Unlock()
	return connect.NewResponse(&podiumv1.ListResponse{Tasks: f.tasks}), nil
}

func (f *fake) Cancel(_ context.Context, req *connect.Request[podiumv1.CancelRequest]) (*connect.Response[podiumv1.CancelResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	f.cancels = append(f.cancels, req.Msg)
	fn := f.cancelFn
	f.mu.Unlock()
	if fn != nil {
		fn(req.Msg)
	}
	return connect.NewResponse(&podiumv1.CancelResponse{Task: f.currentTask()}), nil
}

func (f *fake) Events(ctx context.Context, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error {
	f.mu.Lock()
	f.afters = append(f.afters, req.Msg.GetAfterSeq())
	call := len(f.afters)
	fn := f.eventsFn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, call, req, s)
	}
	if req.Msg.GetId() != f.currentTask().GetId() {
		return connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	if err := f.sendLog(s, req.Msg.GetAfterSeq(), len(f.events)); err != nil {
		return err
	}
	return s.Send(&podiumv1.EventsResponse{Task: f.currentTask()})
}

// sendLog sends the events with seq in (after, upTo].
func (f *fake) sendLog(s *connect.ServerStream[podiumv1.EventsResponse], after uint64, upTo int) error {
	for i := int(after); i < upTo && i < len(f.events); i++ {
		if err := s.Send(&podiumv1.EventsResponse{Seq: uint64(i + 1), Event: f.events[i]}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fake) ListNodes(context.Context, *connect.Request[podiumv1.ListNodesRequest]) (*connect.Response[podiumv1.ListNodesResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	return connect.NewResponse(&podiumv1.ListNodesResponse{Nodes: f.nodes}), nil
}

func (f *fake) CreateEnrollmentToken(_ context.Context, req *connect.Request[podiumv1.CreateEnrollmentTokenRequest]) (*connect.Response[podiumv1.CreateEnrollmentTokenResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	f.tokenReq = req.Msg
	f.mu.Unlock()
	return connect.NewResponse(&podiumv1.CreateEnrollmentTokenResponse{Token: "tok_secret", Labels: req.Msg.GetLabels()}), nil
}

// Event builders.

func stdoutEv(s string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Attempt: 1, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Data: []byte(s)}}}
}

func stderrEv(s string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Attempt: 1, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDERR, Data: []byte(s)}}}
}

func noteEv(s string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Attempt: 1, Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: s}}}
}

func statusEv(st podiumv1.TaskState, reason string, exit *int32, signal int32) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Attempt: 1, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: st, Reason: reason, ExitCode: exit, Signal: signal}}}
}

// testCLI is a cli writing to buffers, with no environment and fast backoff.
type testCLI struct {
	*cli
	out, errOut *syncBuffer
	sigs        chan os.Signal
}

func newTestCLI(env map[string]string) *testCLI {
	tc := &testCLI{out: &syncBuffer{}, errOut: &syncBuffer{}, sigs: make(chan os.Signal, 2)}
	tc.cli = &cli{
		stdin:  strings.NewReader(""),
		stdout: tc.out, stderr: tc.errOut,
		getenv:     func(k string) string { return env[k] },
		signals:    tc.sigs,
		minBackoff: 10 * time.Millisecond, maxBackoff: 50 * time.Millisecond,
	}
	return tc
}

// run runs podium with args and returns its exit code, failing the test if
// it does not return in time (a hang is a bug here, not slowness).
func (tc *testCLI) run(t *testing.T, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- tc.main(ctx, args) }()
	select {
	case code := <-done:
		return code
	case <-time.After(35 * time.Second):
		t.Fatalf("podium %v did not return; stderr so far:\n%s", args, tc.errOut.String())
		return -1
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of run's
// cancel goroutine and the follower.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// closedURL returns the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func i32(v int32) *int32 { return &v }
