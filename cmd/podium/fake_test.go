package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/internal/statusline"
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
	sends    []*podiumv1.SendRequest
	drains   []*podiumv1.DrainNodeRequest
	slotReqs []*podiumv1.SetNodeSlotsRequest
	labelReq []*podiumv1.SetNodeLabelsRequest
	removes  []*podiumv1.RemoveNodeRequest
	// reruns are the Rerun requests (retry_test.go); rerunErr, when set,
	// is Rerun's answer.
	reruns   []*podiumv1.RerunRequest
	rerunErr error

	// task is what Submit, Get and Cancel return (Submit fills in the spec).
	task *podiumv1.Task
	// events is the task's log; events[i] has seq i+1.
	events []*podiumv1.TaskEvent
	// events, when set, replaces the default Events behaviour.
	eventsFn func(ctx context.Context, call int, req *connect.Request[podiumv1.EventsRequest], s *connect.ServerStream[podiumv1.EventsResponse]) error
	// err, when set, is returned by every unary call.
	err   error
	tasks []*podiumv1.Task
	nodes []*podiumv1.Node
	// coordinatorVersion is what ListNodes says the coordinator runs.
	coordinatorVersion string
	cancelFn           func(*podiumv1.CancelRequest)

	// artifacts are the task's artifacts; artifactData holds their bytes by
	// name. artifactsFault, when set, spoils downloads (see artifacts_test.go).
	artifacts      []*podiumv1.Artifact
	artifactData   map[string][]byte
	artifactsFault string
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
	return connect.NewResponse(&podiumv1.ListNodesResponse{Nodes: f.nodes, CoordinatorVersion: f.coordinatorVersion}), nil
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

// Send queues a message for the task, as the coordinator does, only while
// the task is on a node.
func (f *fake) Send(_ context.Context, req *connect.Request[podiumv1.SendRequest]) (*connect.Response[podiumv1.SendResponse], error) {
	if f.err != nil {
		return nil, f.err
	}
	task := f.currentTask()
	if req.Msg.GetId() != task.GetId() {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	f.mu.Lock()
	f.sends = append(f.sends, req.Msg)
	id := int64(len(f.sends)) + 41
	f.mu.Unlock()
	switch task.GetState() {
	case podiumv1.TaskState_TASK_STATE_SCHEDULED, podiumv1.TaskState_TASK_STATE_PROVISIONING, podiumv1.TaskState_TASK_STATE_RUNNING:
	default:
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("task %s cannot take messages: the task is not on a node (it is %s)", task.GetId(), statusline.State(task.GetState())))
	}
	return connect.NewResponse(&podiumv1.SendResponse{MessageId: id}), nil
}

// changeNode applies fn to the node called id in f.nodes, as the coordinator
// changes a node's row, and returns a copy of the result.
func (f *fake) changeNode(id string, fn func(n *podiumv1.Node)) (*podiumv1.Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.GetId() == id {
			fn(n)
			n.FreeSlots = max(n.GetCapacity().GetMaxTasks()-n.GetRunningTasks(), 0)
			if n.GetDraining() {
				n.FreeSlots = 0
			}
			return proto.Clone(n).(*podiumv1.Node), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no node %s (see `podium nodes`)", id))
}

func (f *fake) DrainNode(_ context.Context, req *connect.Request[podiumv1.DrainNodeRequest]) (*connect.Response[podiumv1.DrainNodeResponse], error) {
	f.mu.Lock()
	f.drains = append(f.drains, req.Msg)
	f.mu.Unlock()
	n, err := f.changeNode(req.Msg.GetNodeId(), func(n *podiumv1.Node) { n.Draining = req.Msg.GetDraining() })
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.DrainNodeResponse{Node: n}), nil
}

// fakeOwnMaxTasks is the max_tasks every fake node's agent reports.
const fakeOwnMaxTasks = 8

func (f *fake) SetNodeSlots(_ context.Context, req *connect.Request[podiumv1.SetNodeSlotsRequest]) (*connect.Response[podiumv1.SetNodeSlotsResponse], error) {
	f.mu.Lock()
	f.slotReqs = append(f.slotReqs, req.Msg)
	f.mu.Unlock()
	n, err := f.changeNode(req.Msg.GetNodeId(), func(n *podiumv1.Node) {
		m := req.Msg.GetMaxTasks()
		if m == 0 {
			m = fakeOwnMaxTasks
		}
		n.Capacity = &podiumv1.Capacity{MaxTasks: m}
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.SetNodeSlotsResponse{Node: n}), nil
}

func (f *fake) SetNodeLabels(_ context.Context, req *connect.Request[podiumv1.SetNodeLabelsRequest]) (*connect.Response[podiumv1.SetNodeLabelsResponse], error) {
	f.mu.Lock()
	f.labelReq = append(f.labelReq, req.Msg)
	f.mu.Unlock()
	n, err := f.changeNode(req.Msg.GetNodeId(), func(n *podiumv1.Node) {
		labels := slices.DeleteFunc(n.Labels, func(l string) bool { return slices.Contains(req.Msg.GetRemove(), l) })
		for _, l := range req.Msg.GetAdd() {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
		n.Labels = labels
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.SetNodeLabelsResponse{Node: n}), nil
}

func (f *fake) RemoveNode(_ context.Context, req *connect.Request[podiumv1.RemoveNodeRequest]) (*connect.Response[podiumv1.RemoveNodeResponse], error) {
	f.mu.Lock()
	f.removes = append(f.removes, req.Msg)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.nodes {
		if n.GetId() != req.Msg.GetNodeId() {
			continue
		}
		if n.GetStatus() == podiumv1.NodeStatus_NODE_STATUS_ONLINE && !n.GetDraining() {
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("node %s cannot be removed: it is online and not drained; run `podium node drain %s` first, or stop its agent", n.GetId(), n.GetId()))
		}
		f.nodes = slices.Delete(f.nodes, i, i+1)
		return connect.NewResponse(&podiumv1.RemoveNodeResponse{}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no node %s (see `podium nodes`)", req.Msg.GetNodeId()))
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
