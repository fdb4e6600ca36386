package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// coordinator is an in-process NodeService that hands each stream to the
// test, which plays the coordinator's side of the protocol by hand.
type coordinator struct {
	podiumv1connect.UnimplementedNodeServiceHandler
	conns chan *conn
	// reject, when set, is returned to every stream before it is handed on.
	mu     sync.Mutex
	reject error
}

// conn is one stream as the coordinator sees it.
type conn struct {
	recv chan *podiumv1.StreamRequest // what the node sent, in order
	send chan *podiumv1.StreamResponse
	end  chan error // ends the stream with this error (nil: cleanly)
}

func (c *coordinator) Stream(ctx context.Context, stream *connect.BidiStream[podiumv1.StreamRequest, podiumv1.StreamResponse]) error {
	c.mu.Lock()
	reject := c.reject
	c.mu.Unlock()
	if reject != nil {
		_, _ = stream.Receive()
		return reject
	}
	cn := &conn{
		recv: make(chan *podiumv1.StreamRequest, 10000),
		send: make(chan *podiumv1.StreamResponse, 100),
		end:  make(chan error, 1),
	}
	go func() {
		defer close(cn.recv)
		for {
			msg, err := stream.Receive()
			if err != nil {
				return
			}
			cn.recv <- msg
		}
	}()
	c.conns <- cn
	for {
		select {
		case m := <-cn.send:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-cn.end:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

func (c *coordinator) next(t *testing.T) *conn {
	t.Helper()
	return wait.Recv(t, 20*time.Second, "the node to open a stream", c.conns)
}

// hello reads the first message, which must be a Hello.
func (cn *conn) hello(t *testing.T) *podiumv1.Hello {
	t.Helper()
	m := cn.read(t)
	if m.GetHello() == nil {
		t.Fatalf("first message %v, want Hello", m)
	}
	return m.GetHello()
}

func (cn *conn) read(t *testing.T) *podiumv1.StreamRequest {
	t.Helper()
	select {
	case m, ok := <-cn.recv:
		if !ok {
			t.Fatal("the node closed the stream")
		}
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("nothing from the node within 20 s")
		return nil
	}
}

// untilClosed reads what the node sends until it ends the stream, and
// returns it; a stream still open after patience fails the test with what
// was waited for.
func (cn *conn) untilClosed(t *testing.T, what string) []*podiumv1.StreamRequest {
	t.Helper()
	var got []*podiumv1.StreamRequest
	deadline := time.After(patience)
	for {
		select {
		case m, ok := <-cn.recv:
			if !ok {
				return got
			}
			got = append(got, m)
		case <-deadline:
			t.Fatalf("the stream was still open after %s, waiting for %s", patience, what)
		}
	}
}

// patience bounds the loops below, which skip messages they do not want: a
// node that keeps sending the wrong thing fails the test, by name, instead
// of holding it until the run's timeout.
const patience = 30 * time.Second

// heartbeat waits for the next heartbeat, skipping events.
func (cn *conn) heartbeat(t *testing.T) *podiumv1.Heartbeat {
	t.Helper()
	return cn.heartbeatUntil(t, "a heartbeat", func(*podiumv1.Heartbeat) bool { return true })
}

// heartbeatUntil waits for a heartbeat that satisfies ok, skipping events
// and other heartbeats.
func (cn *conn) heartbeatUntil(t *testing.T, what string, ok func(*podiumv1.Heartbeat) bool) *podiumv1.Heartbeat {
	t.Helper()
	deadline := time.Now().Add(patience)
	var last *podiumv1.Heartbeat
	for time.Now().Before(deadline) {
		if hb := cn.read(t).GetHeartbeat(); hb != nil {
			if ok(hb) {
				return hb
			}
			last = hb
		}
	}
	t.Fatalf("gave up after %s waiting for %s; the last heartbeat was %v", patience, what, last)
	return nil
}

// events reads batches until n events arrived, skipping heartbeats.
func (cn *conn) events(t *testing.T, n int) []*podiumv1.TaskEvent {
	t.Helper()
	var out []*podiumv1.TaskEvent
	deadline := time.Now().Add(patience)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %d events; got %v", patience, n, out)
		}
		if b := cn.read(t).GetEvents(); b != nil {
			out = append(out, b.GetEvents()...)
		}
	}
	if len(out) > n {
		t.Fatalf("got %d events, want %d: %v", len(out), n, out)
	}
	return out
}

// batch reads the next batch of events, skipping heartbeats.
func (cn *conn) batch(t *testing.T) []*podiumv1.TaskEvent {
	t.Helper()
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if b := cn.read(t).GetEvents(); b != nil {
			return b.GetEvents()
		}
	}
	t.Fatalf("gave up after %s waiting for a batch of events", patience)
	return nil
}

func (cn *conn) push(m *podiumv1.StreamResponse) { cn.send <- m }

func helloAck(adopt ...*podiumv1.Adopt) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_HelloAck{HelloAck: &podiumv1.HelloAck{
		NodeId: "n-1", Replica: "r-1", HeartbeatIntervalMs: 100, Adopt: adopt,
	}}}
}

func assign(task string) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: &podiumv1.Assign{
		TaskId: task, Attempt: 1, Spec: &podiumv1.TaskSpec{Image: "img", Env: map[string]string{"SECRET": "hunter2"}},
	}}}
}

func ack(task string, seq uint64) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Ack{Ack: &podiumv1.Ack{TaskId: task, Attempt: 1, AckedSeq: seq}}}
}

// runner is a scripted Runner: the test decides what each task emits.
type runner struct {
	mu      sync.Mutex
	runs    map[attempt.Key]attempt.Emit
	dones   map[attempt.Key]chan struct{}
	cancels chan string
	injects chan string
	adopted map[attempt.Key][]*podiumv1.SecretValue
	leases  map[attempt.Key]time.Time
}

func (r *runner) Adopted(taskID string, n int32, secrets []*podiumv1.SecretValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adopted == nil {
		r.adopted = make(map[attempt.Key][]*podiumv1.SecretValue)
	}
	r.adopted[attempt.Key{TaskID: taskID, Attempt: n}] = secrets
}

// Lease records the fence each attempt's runner was told last.
func (r *runner) Lease(taskID string, n int32, fenceAt time.Time, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leases == nil {
		r.leases = make(map[attempt.Key]time.Time)
	}
	r.leases[attempt.Key{TaskID: taskID, Attempt: n}] = fenceAt
}

func newRunner() *runner {
	return &runner{runs: make(map[attempt.Key]attempt.Emit), dones: make(map[attempt.Key]chan struct{}),
		cancels: make(chan string, 10), injects: make(chan string, 10)}
}

func (r *runner) Inject(taskID string, n int32, id int64, text string) (bool, error) {
	r.mu.Lock()
	_, ok := r.runs[attempt.Key{TaskID: taskID, Attempt: n}]
	r.mu.Unlock()
	if !ok {
		return false, attempt.ErrNotRunning
	}
	r.injects <- fmt.Sprintf("%s/%d: %s", taskID, id, text)
	return true, nil
}

func (r *runner) Start(_ context.Context, a *podiumv1.Assign, emit attempt.Emit) (<-chan struct{}, error) {
	key := attempt.Key{TaskID: a.GetTaskId(), Attempt: a.GetAttempt()}
	r.mu.Lock()
	if _, ok := r.runs[key]; ok {
		r.mu.Unlock()
		return nil, attempt.ErrAlreadyRunning
	}
	r.runs[key] = emit
	done := make(chan struct{})
	r.dones[key] = done
	r.mu.Unlock()
	r.status(key, podiumv1.TaskState_TASK_STATE_PROVISIONING, "")
	return done, nil
}

func (r *runner) Cancel(taskID string, n int32, reason string, _ time.Duration) bool {
	key := attempt.Key{TaskID: taskID, Attempt: n}
	r.mu.Lock()
	_, ok := r.runs[key]
	r.mu.Unlock()
	if ok {
		r.cancels <- taskID + ": " + reason
		r.status(key, podiumv1.TaskState_TASK_STATE_CANCELLED, reason)
	}
	return ok
}

func (r *runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func (r *runner) emit(key attempt.Key, body *podiumv1.TaskEvent) {
	r.mu.Lock()
	emit := r.runs[key]
	var done chan struct{}
	if isTerminal(body.GetStatus().GetState()) {
		delete(r.runs, key)
		done = r.dones[key]
		delete(r.dones, key)
	}
	r.mu.Unlock()
	body.TaskId, body.Attempt, body.Time = key.TaskID, key.Attempt, timestamppb.Now()
	var cur *attempt.Cursor
	if l := body.GetLog(); l != nil {
		cur = &attempt.Cursor{Started: true}
		cur.Task.Stdout = l.GetOffset() + uint64(len(l.GetData()))
	}
	emit(body, cur)
	if done != nil {
		close(done)
	}
}

func (r *runner) status(key attempt.Key, s podiumv1.TaskState, reason string) {
	r.emit(key, &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s, Reason: reason}}})
}

func (r *runner) log(key attempt.Key, offset uint64, data string) {
	r.emit(key, &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{
		Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Offset: offset, Data: []byte(data),
	}}})
}

func isTerminal(s podiumv1.TaskState) bool {
	return s >= podiumv1.TaskState_TASK_STATE_SUCCEEDED
}

func key(task string) attempt.Key { return attempt.Key{TaskID: task, Attempt: 1} }

// logBuffer collects the session's log so a test can check what it says.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type fixture struct {
	coord *coordinator
	logs  *logBuffer
	sess  *session.Session
	stop  func() error // ends the session and returns what Run returned
}

// start serves a coordinator and runs a session against it until the test
// ends. reject, if not nil, is what the coordinator answers every stream with
// until the test clears it.
func start(t *testing.T, r session.Runner, maxTasks int, reject error) *fixture {
	t.Helper()
	return startWith(t, r, session.Config{MaxTasks: maxTasks}, reject)
}

// selfURL in Config.Coordinators or Config.Replicas given to startWith stands
// for the test coordinator's own URL.
const selfURL = "self"

// startWith is start with more of the session's configuration.
func startWith(t *testing.T, r session.Runner, cfg session.Config, reject error) *fixture {
	t.Helper()
	coord := &coordinator{conns: make(chan *conn, 10), reject: reject}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewNodeServiceHandler(coord))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()

	logs := &logBuffer{}
	if cfg.CoordinatorURL == "" {
		cfg.CoordinatorURL = srv.URL
	}
	for _, l := range [][]string{cfg.Coordinators, cfg.Replicas} {
		for i, u := range l {
			if u == selfURL {
				l[i] = srv.URL
			}
		}
	}
	cfg.NodeID, cfg.NodeKey, cfg.Hostname, cfg.AgentVersion = "n-1", "k-1", "box", "test"
	cfg.Runner = r
	cfg.Capacity = func(context.Context) *podiumv1.Capacity {
		return &podiumv1.Capacity{CpuCores: 4, MemoryMb: 1024, DiskFreeMb: 500}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 50*time.Millisecond
	s, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(patience):
				runErr = fmt.Errorf("Run did not return within %s of its context ending", patience)
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); !errors.Is(err, context.Canceled) && !errors.Is(err, session.ErrDrained) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		srv.Close()
		if t.Failed() {
			t.Logf("session log:\n%s", logs.String())
		}
	})
	return &fixture{coord: coord, logs: logs, sess: s, stop: stop}
}

func seqs(evs []*podiumv1.TaskEvent) string {
	var parts []string
	for _, ev := range evs {
		parts = append(parts, fmt.Sprintf("%s/%d", ev.GetTaskId(), ev.GetSeq()))
	}
	return strings.Join(parts, " ")
}

func TestHelloHeartbeatAssignEventsAck(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	h := cn.hello(t)
	if h.GetNodeId() != "n-1" || h.GetNodeKey() != "k-1" || h.GetHostname() != "box" || h.GetAgentVersion() != "test" {
		t.Fatalf("hello %v", h)
	}
	if h.GetCapacity().GetMaxTasks() != 2 || h.GetCapacity().GetCpuCores() != 4 || len(h.GetRunning()) != 0 {
		t.Fatalf("hello capacity %v running %v", h.GetCapacity(), h.GetRunning())
	}
	cn.push(helloAck())
	hb := cn.heartbeat(t)
	if hb.GetFreeSlots() != 2 || hb.GetRunningTasks() != 0 || hb.GetCapacity().GetMaxTasks() != 2 {
		t.Fatalf("first heartbeat %v", hb)
	}

	cn.push(assign("t1"))
	evs := cn.events(t, 1)
	if evs[0].GetSeq() != 1 || evs[0].GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("first event %v, want seq 1 PROVISIONING", evs[0])
	}
	if hb := cn.heartbeat(t); hb.GetRunningTasks() != 1 || hb.GetFreeSlots() != 1 {
		t.Fatalf("heartbeat with one task running: %v", hb)
	}

	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_RUNNING, "")
	r.log(key("t1"), 0, "hello\n")
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_SUCCEEDED, "")
	evs = cn.events(t, 3)
	if got := seqs(evs); got != "t1/2 t1/3 t1/4" {
		t.Fatalf("events %s, want t1/2 t1/3 t1/4", got)
	}
	if string(evs[1].GetLog().GetData()) != "hello\n" {
		t.Fatalf("log event %v", evs[1])
	}
	cn.push(ack("t1", 4))

	// Once its terminal event is acked the node no longer reports the task,
	// and a repeated assignment of it is not run again: the node handles what
	// the coordinator sends in order, so had it run t1 again, t1's first
	// event would come before t2's.
	wait.For(t, patience, "the node to take the ack of t1's last event", func() bool { return f.sess.Stats().EventsSpooled == 0 })
	cn.push(assign("t1"))
	cn.push(assign("t2"))
	if evs := cn.events(t, 1); seqs(evs) != "t2/1" {
		t.Fatalf("after a repeated assignment of t1 and a new t2: %s, want t2/1 alone", seqs(evs))
	}
	cn.end <- errors.New("restart")
	cn = f.coord.next(t)
	if h := cn.hello(t); len(h.GetRunning()) != 1 || h.GetRunning()[0].GetTaskId() != "t2" {
		t.Fatalf("hello after t1's terminal ack reports %v, want only t2", h.GetRunning())
	}
	if strings.Contains(f.logs.String(), "hunter2") {
		t.Fatal("the session logged a secret from an assignment's environment")
	}
}

func TestRejectsWithoutFreeSlot(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 1, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.push(assign("t2"))
	evs := cn.events(t, 2)
	byTask := map[string]*podiumv1.TaskEvent{}
	for _, ev := range evs {
		byTask[ev.GetTaskId()] = ev
	}
	if s := byTask["t1"].GetStatus(); s.GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("t1: %v, want PROVISIONING", s)
	}
	rej := byTask["t2"]
	if rej.GetSeq() != 1 || rej.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_QUEUED ||
		rej.GetStatus().GetReason() != session.RejectReasonNoSlot {
		t.Fatalf("t2: %v, want seq 1 QUEUED %q", rej, session.RejectReasonNoSlot)
	}
	if r.Running() != 1 {
		t.Fatalf("runner runs %d tasks, want 1", r.Running())
	}
	if hb := cn.heartbeat(t); hb.GetFreeSlots() != 0 {
		t.Fatalf("heartbeat %v, want no free slot", hb)
	}

	// Once the rejection is acked and a slot is free, the same attempt may be
	// assigned again; its events continue after the stored rejection.
	cn.push(ack("t2", 1))
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_SUCCEEDED, "")
	cn.events(t, 1)
	cn.push(assign("t2"))
	evs = cn.events(t, 1)
	if evs[0].GetTaskId() != "t2" || evs[0].GetSeq() != 2 || evs[0].GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("reassigned t2: %v, want seq 2 PROVISIONING", evs[0])
	}
}

func TestDrainingRejectsAndAdvertisesNoSlot(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 4, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	ackMsg := helloAck()
	ackMsg.GetHelloAck().Draining = true
	cn.push(ackMsg)
	if hb := cn.heartbeat(t); hb.GetFreeSlots() != 0 {
		t.Fatalf("draining node advertises %d free slots", hb.GetFreeSlots())
	}
	cn.push(assign("t1"))
	if ev := cn.events(t, 1)[0]; ev.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("assignment to a draining node: %v, want QUEUED", ev)
	}

	// The live half of an undrain: a HelloAck on the open stream.
	undrain := helloAck()
	cn.push(undrain)
	cn.heartbeatUntil(t, "4 free slots after the undrain", func(hb *podiumv1.Heartbeat) bool { return hb.GetFreeSlots() == 4 })
	// The slot override arrives the same way.
	override := helloAck()
	override.GetHelloAck().MaxTasksOverride = 1
	cn.push(override)
	cn.heartbeatUntil(t, "1 slot after the override", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetFreeSlots() == 1 && hb.GetCapacity().GetMaxTasks() == 1
	})
}

func TestReconnectResendsUnacked(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_RUNNING, "")
	r.log(key("t1"), 0, "abc")
	cn.events(t, 2)
	cn.push(ack("t1", 1))
	wait.For(t, patience, "the node to take the ack of seq 1", func() bool { return f.sess.Stats().EventsSpooled == 2 })
	cn.end <- connect.NewError(connect.CodeUnavailable, errors.New("replica going away"))

	// While disconnected the task keeps producing.
	r.log(key("t1"), 3, "def")

	cn = f.coord.next(t)
	h := cn.hello(t)
	if len(h.GetRunning()) != 1 || h.GetRunning()[0].GetTaskId() != "t1" || h.GetRunning()[0].GetLastSeq() != 4 {
		t.Fatalf("hello running %v, want t1 with last_seq 4", h.GetRunning())
	}
	// The coordinator stored up to seq 2 (the ack for it was lost).
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: true, AckedSeq: 2}))
	evs := cn.events(t, 2)
	if got := seqs(evs); got != "t1/3 t1/4" {
		t.Fatalf("resent %s, want t1/3 t1/4", got)
	}
	if evs[1].GetLog().GetOffset() != 3 || string(evs[1].GetLog().GetData()) != "def" {
		t.Fatalf("resent log %v", evs[1])
	}
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_SUCCEEDED, "")
	if got := seqs(cn.events(t, 1)); got != "t1/5" {
		t.Fatalf("next event %s, want t1/5", got)
	}
	if r.Running() != 0 {
		t.Fatal("task not finished")
	}
}

func TestAdoptKeepFalseCancels(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.end <- errors.New("restart")

	cn = f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: false}))
	if c := wait.Recv(t, patience, "the disowned task to be cancelled", r.cancels); c != "t1: "+session.CancelReasonNotHeld {
		t.Fatalf("cancel %q", c)
	}
	// Its teardown events are not sent: the coordinator has disowned it. (Had
	// they been queued, they would come before those of a task assigned after.)
	cn.push(assign("t2"))
	if evs := cn.events(t, 1); seqs(evs) != "t2/1" {
		t.Fatalf("after the disowned task's teardown and a new t2: %s, want t2/1 alone", seqs(evs))
	}
	if !strings.Contains(f.logs.String(), "no longer holds") {
		t.Fatal("the log does not say why the task was cancelled")
	}
}

func TestCancelMessage(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: &podiumv1.Cancel{
		TaskId: "t1", Attempt: 1, Reason: "user asked", GraceSeconds: 5,
	}}})
	if c := wait.Recv(t, patience, "the runner to be asked to cancel", r.cancels); c != "t1: user asked" {
		t.Fatalf("cancel %q", c)
	}
	ev := cn.events(t, 1)[0]
	if ev.GetSeq() != 2 || ev.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("event %v, want seq 2 CANCELLED", ev)
	}
}

func TestUnauthenticatedKeepsRetrying(t *testing.T) {
	t.Parallel()
	r := newRunner()
	coordErr := connect.NewError(connect.CodeUnauthenticated, errors.New("unknown node key"))
	f := start(t, r, 1, nil)
	f.coord.mu.Lock()
	f.coord.reject = coordErr
	f.coord.mu.Unlock()
	wait.For(t, patience, "re-enroll advice in the log", func() bool { return strings.Contains(f.logs.String(), "enroll it again") })
	f.coord.mu.Lock()
	f.coord.reject = nil
	f.coord.mu.Unlock()
	cn := f.coord.next(t)
	cn.hello(t)
}

// TestWithDocker runs one real task through a real executor and the session,
// and reassembles its output from the stream.
func TestWithDocker(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	nodeID := agenttest.NodeID(t)
	ex, err := executor.New(executor.Config{Docker: dc, NodeID: nodeID, RunnerPath: agenttest.Runner(t), TasksDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, ex, 2, nil)
	t.Cleanup(func() { agenttest.AssertNoContainers(t, dc, nodeID) })
	t.Cleanup(ex.Wait)
	taskID := fmt.Sprintf("t-docker-%d", os.Getpid())
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: &podiumv1.Assign{
		TaskId: taskID, Attempt: 1,
		Spec: &podiumv1.TaskSpec{Image: image, Command: []string{"sh", "-c", "echo hi; echo oops >&2; exit 3"}},
	}}})

	var stdout, stderr bytes.Buffer
	var states []string
	var lastSeq uint64
	deadline := time.Now().Add(2 * time.Minute)
	for done := false; !done; {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for the task's terminal status; states so far %v", states)
		}
		for _, ev := range cn.batch(t) {
			if ev.GetSeq() != lastSeq+1 {
				t.Fatalf("seq %d after %d", ev.GetSeq(), lastSeq)
			}
			lastSeq = ev.GetSeq()
			if l := ev.GetLog(); l != nil {
				if l.GetStream() == podiumv1.LogStream_LOG_STREAM_STDOUT {
					stdout.Write(l.GetData())
				} else {
					stderr.Write(l.GetData())
				}
			}
			if s := ev.GetStatus(); s != nil {
				states = append(states, s.GetState().String())
				done = isTerminal(s.GetState())
				if done && (s.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || s.GetExitCode() != 3) {
					t.Fatalf("terminal %v, want FAILED exit 3", s)
				}
			}
		}
	}
	if stdout.String() != "hi\n" || stderr.String() != "oops\n" {
		t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if got := strings.Join(states, ","); got != "TASK_STATE_PROVISIONING,TASK_STATE_RUNNING,TASK_STATE_FAILED" {
		t.Fatalf("states %s", got)
	}
	cn.push(ack(taskID, lastSeq))
}

func nodeConfig(draining bool, override int32) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Config{Config: &podiumv1.NodeConfig{
		Draining: draining, MaxTasksOverride: override, Labels: []string{"gpu"}}}}
}

// TestNodeConfigAppliesAtOnce: the live push of a drain or a slot override
// changes what the node advertises and accepts without a reconnect.
func TestNodeConfigAppliesAtOnce(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 4, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.heartbeat(t)
	cn.push(nodeConfig(true, 0))
	cn.heartbeatUntil(t, "no free slot once draining", func(hb *podiumv1.Heartbeat) bool { return hb.GetFreeSlots() == 0 })
	cn.push(assign("t1"))
	if ev := cn.events(t, 1)[0]; ev.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("assignment while draining: %v, want QUEUED", ev)
	}
	cn.push(nodeConfig(false, 1))
	cn.heartbeatUntil(t, "1 slot after the undrain with an override", func(hb *podiumv1.Heartbeat) bool {
		return hb.GetFreeSlots() == 1 && hb.GetCapacity().GetMaxTasks() == 1
	})
	if !strings.Contains(f.logs.String(), "labels=[gpu]") {
		t.Fatal("the log does not show the node's new labels")
	}
}

func TestInjectReachesTheTask(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Inject{Inject: &podiumv1.Inject{
		TaskId: "t1", Attempt: 1, MessageId: 5, Text: "hello task"}}})
	if got := wait.Recv(t, patience, "the message to reach the runner", r.injects); got != "t1/5: hello task" {
		t.Fatalf("injected %q", got)
	}
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Inject{Inject: &podiumv1.Inject{
		TaskId: "gone", Attempt: 1, MessageId: 6, Text: "too late"}}})
	wait.For(t, patience, "the message for a task that is not here to be logged as dropped", func() bool {
		return strings.Contains(f.logs.String(), "not running here; dropped")
	})
}

// TestExitOnDrain: a draining node with ExitOnDrain ends its session once
// its last task ended and the coordinator stored every event, not before.
func TestExitOnDrain(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := startWith(t, r, session.Config{MaxTasks: 2, ExitOnDrain: true}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.push(ack("t1", 1))
	cn.push(nodeConfig(true, 0))
	cn.heartbeat(t)
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_SUCCEEDED, "")
	cn.events(t, 1)
	ended := make(chan error, 1)
	go func() { ended <- f.stopAfterDrain(patience) }()
	// That it does not end early can only be seen by giving it the time to:
	// several of its 100 ms heartbeats, each a moment it could decide to.
	select {
	case err := <-ended:
		t.Fatalf("the session ended (%v) before the coordinator acknowledged the last event", err)
	case <-time.After(300 * time.Millisecond):
	}
	cn.push(ack("t1", 2))
	if err := wait.Recv(t, patience, "a drained node to exit", ended); !errors.Is(err, session.ErrDrained) {
		t.Fatalf("Run returned %v, want ErrDrained", err)
	}
}

// stopAfterDrain waits for Run to return by itself, for at most d.
func (f *fixture) stopAfterDrain(d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(f.logs.String(), "the node is drained") {
		if time.Now().After(deadline) {
			return fmt.Errorf("the session did not say the node is drained within %s", d)
		}
		time.Sleep(wait.Poll)
	}
	return f.stop()
}

// TestSpoolCarriesEventsAcrossRestart: a second session on the same spool
// (the next agent process) reports the task with its last seq, hands it back
// for resuming with its cursor, and re-sends what was not acknowledged.
func TestSpoolCarriesEventsAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := newRunner()
	f := startWith(t, r, session.Config{MaxTasks: 2, SpoolDir: dir}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	r.status(key("t1"), podiumv1.TaskState_TASK_STATE_RUNNING, "")
	r.log(key("t1"), 0, "abc")
	r.log(key("t1"), 3, "def")
	cn.events(t, 3)
	cn.push(ack("t1", 3))
	wait.For(t, patience, "the node to take the ack of seq 3", func() bool { return f.sess.Stats().EventsSpooled == 1 })
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	f2 := startWith(t, newRunner(), session.Config{MaxTasks: 2, SpoolDir: dir}, nil)
	rec := f2.sess.Recovered()
	if len(rec) != 1 || rec[0].Assign.GetTaskId() != "t1" || rec[0].Assign.GetSpec().GetEnv() != nil {
		t.Fatalf("recovered %v, want t1 without its environment", rec)
	}
	cur, err := attempt.ParseCursor(rec[0].Cursor)
	if err != nil || cur.Task.Stdout != 6 {
		t.Fatalf("recovered cursor %+v (%v), want stdout at 6", cur, err)
	}
	cn = f2.coord.next(t)
	h := cn.hello(t)
	if len(h.GetRunning()) != 1 || h.GetRunning()[0].GetLastSeq() != 4 {
		t.Fatalf("hello running %v, want t1 with last_seq 4", h.GetRunning())
	}
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: true, AckedSeq: 3}))
	evs := cn.events(t, 1)
	if evs[0].GetSeq() != 4 || string(evs[0].GetLog().GetData()) != "def" {
		t.Fatalf("re-sent %v, want seq 4 \"def\"", evs[0])
	}
}

// TestLowDiskAdvertisesNoSlot: below the free-disk watermark the node takes
// nothing new, however many slots it has.
func TestLowDiskAdvertisesNoSlot(t *testing.T) {
	t.Parallel()
	f := startWith(t, newRunner(), session.Config{MaxTasks: 4, MinFreeDiskMB: 1000}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	if hb := cn.heartbeat(t); hb.GetFreeSlots() != 0 || hb.GetCapacity().GetDiskFreeMb() != 500 {
		t.Fatalf("heartbeat %v, want no free slot with 500 MB free under a 1000 MB watermark", hb)
	}
	cn.push(assign("t1"))
	if ev := cn.events(t, 1)[0]; ev.GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("assignment with the disk nearly full: %v, want QUEUED", ev)
	}
}

// TestAdoptHandsTheRunnerItsSecrets: the values of a kept attempt's secrets
// in a HelloAck reach the runner, which is how a resumed attempt's output
// goes on being redacted after the agent restarts.
func TestAdoptHandsTheRunnerItsSecrets(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := start(t, r, 2, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.end <- errors.New("restart")

	cn = f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: true, AckedSeq: 1,
		Secrets: []*podiumv1.SecretValue{{Name: "db-password", Value: []byte("hunter2-xyz"), Env: "PGPASSWORD"}}}))
	wait.For(t, patience, "the runner to be handed t1's secrets", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.adopted[key("t1")]
		return len(s) == 1 && s[0].GetName() == "db-password" && string(s[0].GetValue()) == "hunter2-xyz"
	})
}

// An assignment Config.Refuse turns down (the agent's GPU check) goes back to
// the coordinator as one without a free slot does, saying why, and is not
// run; the next one is.
func TestRefusedAssignmentIsGivenBack(t *testing.T) {
	t.Parallel()
	r := newRunner()
	const why = "node has 0 free of the 1 GPU the task asks"
	f := startWith(t, r, session.Config{MaxTasks: 2, Refuse: func(a *podiumv1.Assign) string {
		if a.GetTaskId() == "t1" {
			return why
		}
		return ""
	}}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.push(assign("t2"))
	evs := cn.events(t, 2)
	if evs[0].GetTaskId() != "t1" || evs[0].GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_QUEUED ||
		evs[0].GetStatus().GetReason() != why {
		t.Fatalf("t1: %v, want QUEUED %q", evs[0], why)
	}
	if evs[1].GetTaskId() != "t2" || evs[1].GetStatus().GetState() != podiumv1.TaskState_TASK_STATE_PROVISIONING {
		t.Fatalf("t2: %v, want PROVISIONING", evs[1])
	}
	if r.Running() != 1 {
		t.Fatalf("runner runs %d tasks, want only t2", r.Running())
	}
}
