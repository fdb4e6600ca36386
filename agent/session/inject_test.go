package session_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// stuckInbox is a scripted runner whose inbox never answers until released.
type stuckInbox struct {
	*runner
	release chan struct{}
}

func (s stuckInbox) Inject(string, int32, int64, string) (bool, error) {
	<-s.release
	return true, nil
}

func inject(task string, id int64, text string) *podiumv1.StreamResponse {
	return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Inject{Inject: &podiumv1.Inject{
		TaskId: task, Attempt: 1, MessageId: id, Text: text}}}
}

// TestStuckInboxDoesNotStopTheStream: a delivery that never returns is
// given up on with an error in the log, and meanwhile the node goes on
// taking cancels and assignments; deliveries stuck past a bound make later
// messages fail at once instead of piling up.
func TestStuckInboxDoesNotStopTheStream(t *testing.T) {
	t.Parallel()
	r := stuckInbox{runner: newRunner(), release: make(chan struct{})}
	f := startWith(t, r, session.Config{MaxTasks: 4, InjectTimeout: 50 * time.Millisecond}, nil)
	t.Cleanup(func() { close(r.release) }) // before the session stops: cleanups run last first
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1)
	cn.push(inject("t1", 1, "never delivered"))
	// Pushed behind the stuck delivery: both must still be handled.
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: &podiumv1.Cancel{
		TaskId: "t1", Attempt: 1, Reason: "user asked"}}})
	cn.push(assign("t2"))
	if c := wait.Recv(t, patience, "the cancel behind a stuck delivery", r.cancels); c != "t1: user asked" {
		t.Fatalf("cancel %q", c)
	}
	wait.For(t, patience, "t2's PROVISIONING behind a stuck delivery", func() bool {
		return sawTask(cn, "t2")
	})
	wait.For(t, patience, "the stuck delivery to be given up on", func() bool {
		return strings.Contains(f.logs.String(), "could not deliver a message to a task's inbox within the time allowed")
	})
	for id := int64(2); id <= 6; id++ {
		cn.push(inject("t2", id, "more"))
	}
	wait.For(t, patience, "later messages to be refused while deliveries are stuck", func() bool {
		return strings.Contains(f.logs.String(), "earlier deliveries are stuck")
	})
}

// sawTask reads what the node sent until an event of task shows
// up, or nothing is waiting.
func sawTask(cn *conn, task string) bool {
	for {
		select {
		case m, ok := <-cn.recv:
			if !ok {
				return false
			}
			for _, ev := range m.GetEvents().GetEvents() {
				if ev.GetTaskId() == task {
					return true
				}
			}
		default:
			return false
		}
	}
}

// events collects what the node sends, by task, from a goroutine, so a test
// can wait on the agent's logs and its events at once.
type eventLog struct {
	mu     sync.Mutex
	byTask map[string][]*podiumv1.TaskEvent
}

func collect(cn *conn) *eventLog {
	l := &eventLog{byTask: map[string][]*podiumv1.TaskEvent{}}
	go func() {
		for m := range cn.recv {
			l.mu.Lock()
			for _, ev := range m.GetEvents().GetEvents() {
				l.byTask[ev.GetTaskId()] = append(l.byTask[ev.GetTaskId()], ev)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) stdout(task string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	for _, ev := range l.byTask[task] {
		if lg := ev.GetLog(); lg != nil && lg.GetStream() == podiumv1.LogStream_LOG_STREAM_STDOUT {
			b.Write(lg.GetData())
		}
	}
	return b.String()
}

func (l *eventLog) notes(task string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, ev := range l.byTask[task] {
		if n := ev.GetNote(); n != nil {
			b.WriteString(n.GetText() + "\n")
		}
	}
	return b.String()
}

func (l *eventLog) final(task string) *podiumv1.StatusChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.byTask[task] {
		if s := ev.GetStatus(); s != nil && isTerminal(s.GetState()) {
			return s
		}
	}
	return nil
}

// all is every event as text, for looking for what must not be there.
func (l *eventLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, evs := range l.byTask {
		for _, ev := range evs {
			fmt.Fprintf(&b, "%v %s\n", ev, ev.GetLog().GetData())
		}
	}
	return b.String()
}

// logLine reports whether one line of the log mentions all of words.
func logLine(log string, words ...string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestHostileInboxCannotHurtTheNode runs real tasks that turn their inbox's
// .cursor, which the agent reads as root, into a link to the node's key, a
// link to /dev/zero, a FIFO, a device and a huge file, and sends each a
// message. Each delivery fails at once with an error, in the agent's log and
// the task's, that says what is wrong and quotes nothing; the key appears
// nowhere; and the node goes on taking work and delivering messages.
func TestHostileInboxCannotHurtTheNode(t *testing.T) {
	t.Parallel()
	image := dockertest.EnsureImage(t)
	dc := dockertest.Client(t)
	nodeID := agenttest.NodeID(t)
	const secret = "NODE-KEY-3b9e0c-must-never-be-logged"
	keyFile := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(keyFile, []byte(`{"node_key":"`+secret+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exLogs := &logBuffer{}
	ex, err := executor.New(executor.Config{Docker: dc, NodeID: nodeID, RunnerPath: agenttest.Runner(t), TasksDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(exLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, ex, 8, nil)
	t.Cleanup(func() { agenttest.AssertNoContainers(t, dc, nodeID) })
	t.Cleanup(ex.Wait)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("executor log:\n%s", exLogs.String())
		}
	})
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	evs := collect(cn)

	cases := []struct {
		name, plant string
		caps        []string
		want        string
	}{
		{"key", "ln -s " + keyFile + " .cursor", nil, "is a symbolic link"},
		{"zero", "ln -s /dev/zero .cursor", nil, "is a symbolic link"},
		{"fifo", "mkfifo .cursor", nil, "not a regular file (a FIFO)"},
		{"device", "mknod .cursor c 1 5", []string{"MKNOD"}, "not a regular file (a device)"},
		{"huge", "dd if=/dev/zero of=.cursor bs=1048576 count=8 2>/dev/null", nil, "is larger than the agent reads"},
	}
	taskOf := func(name string) string { return fmt.Sprintf("t-hostile-%d-%s", os.Getpid(), name) }
	for _, c := range cases {
		cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: &podiumv1.Assign{
			TaskId: taskOf(c.name), Attempt: 1,
			Spec: &podiumv1.TaskSpec{Image: image, Capabilities: c.caps,
				Command: []string{"sh", "-c", "cd /run/podium/inbox && " + c.plant + " && echo ready && exec sleep 600"}},
		}}})
	}
	for _, c := range cases {
		wait.For(t, 2*time.Minute, c.name+" task to plant its .cursor", func() bool {
			return evs.stdout(taskOf(c.name)) == "ready\n" || evs.final(taskOf(c.name)) != nil
		})
		if st := evs.final(taskOf(c.name)); st != nil {
			t.Fatalf("%s task ended before its message was sent: %v", c.name, st)
		}
	}
	for _, c := range cases {
		cn.push(inject(taskOf(c.name), 1, "hello"))
	}
	for _, c := range cases {
		task := taskOf(c.name)
		wait.For(t, 5*time.Second, "the agent to log that "+c.name+"'s message could not be delivered", func() bool {
			return logLine(f.logs.String(), "could not deliver a message to a task's inbox", task, ".cursor", c.want)
		})
		wait.For(t, 5*time.Second, "a note in "+c.name+"'s log that its message was not delivered", func() bool {
			return strings.Contains(evs.notes(task), "message 1 was not delivered to /run/podium/inbox: .cursor: ")
		})
	}

	// The node goes on: a new task is assigned, started and sent a message,
	// which it reads.
	ok := taskOf("after")
	cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: &podiumv1.Assign{
		TaskId: ok, Attempt: 1,
		Spec: &podiumv1.TaskSpec{Image: image, Command: []string{"sh", "-c", "echo waiting; podium-runner ask"}},
	}}})
	wait.For(t, 2*time.Minute, "the task assigned after the hostile ones to start", func() bool {
		return evs.stdout(ok) == "waiting\n"
	})
	cn.push(inject(ok, 1, "still delivering"))
	wait.For(t, 2*time.Minute, "the task assigned after the hostile ones to read its message and end", func() bool {
		return evs.final(ok) != nil
	})
	if st, out := evs.final(ok), evs.stdout(ok); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || out != "waiting\nstill delivering\n" {
		t.Fatalf("the task after: %v, stdout %q", st, out)
	}

	for _, c := range cases {
		cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: &podiumv1.Cancel{
			TaskId: taskOf(c.name), Attempt: 1, Reason: "the test is over", GraceSeconds: 1}}})
	}
	for _, c := range cases {
		wait.For(t, 2*time.Minute, c.name+" task to be cancelled", func() bool { return evs.final(taskOf(c.name)) != nil })
		if st := evs.final(taskOf(c.name)); st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED {
			t.Errorf("%s task ended %v, want CANCELLED", c.name, st)
		}
	}
	for what, text := range map[string]string{"the session's log": f.logs.String(), "the executor's log": exLogs.String(), "the tasks' events": evs.all()} {
		if strings.Contains(text, secret) {
			t.Errorf("the node's key is in %s", what)
		}
	}
}
