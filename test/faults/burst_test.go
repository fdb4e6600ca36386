package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// submitted is a task a Submit call was answered for: acknowledged.
type submitted struct {
	id string
	w  Workload
}

// submitWorkload submits w through the API (no CLI) and returns the task id
// the replica acknowledged it with, or the error.
func submitWorkload(tasks podiumv1connect.TaskServiceClient, image string, w Workload) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{
		Image: image, Command: []string{"sh", "-c", w.Script()},
	}}))
	if err != nil {
		return "", err
	}
	return res.Msg.GetTask().GetId(), nil
}

// waitEnded waits until the task is in a final state at the replica and
// returns it.
func waitEnded(t testing.TB, tasks podiumv1connect.TaskServiceClient, id string) *podiumv1.Task {
	t.Helper()
	var tk *podiumv1.Task
	wait.For(t, runWithin, "task "+id+" to end", func() bool {
		res, err := tasks.Get(context.Background(), connect.NewRequest(&podiumv1.GetRequest{Id: id}))
		if err != nil {
			return false
		}
		tk = res.Msg.Task
		switch tk.State {
		case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
			podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
			return true
		}
		return false
	})
	return tk
}

// checkStored checks a workload task that nobody followed, once ended: it
// ended with its own status and code, and its stored stdout is every line
// once, in order, then the task's own sha256 of those bytes: no event lost,
// none stored twice.
func (w Workload) checkStored(t testing.TB, r *Replica, tk *podiumv1.Task) {
	t.Helper()
	wantState := podiumv1.TaskState_TASK_STATE_SUCCEEDED
	if w.Code != 0 {
		wantState = podiumv1.TaskState_TASK_STATE_FAILED
	}
	if tk.State != wantState || tk.ExitCode == nil || tk.GetExitCode() != int32(w.Code) {
		t.Errorf("task %s ended %s (%q) with exit code %v, want %s with its own %d", tk.Id, tk.State, tk.Reason, tk.ExitCode, wantState, w.Code)
		return
	}
	out, _ := r.StoredOutput(t, tk.Id)
	body, sum, ok := splitChecksum(out)
	if !ok {
		t.Errorf("task %s: the stored stdout does not end with the task's checksum line:\n%s", tk.Id, out)
		return
	}
	if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum || !bytes.Equal(body, w.want()) {
		t.Errorf("task %s: the stored stdout before the checksum line (sha256 %x, the task's own %s) is:\n%s\nwant lines 1..%d once each, in order", tk.Id, got, sum, body, w.Lines)
	}
}

// checkEventsOnce checks that each event of the task is stored once: the
// stored positions rise one by one, each log chunk of an attempt's stream
// starts at the offset where the one before it ended (no chunk stored twice,
// none missing), and no attempt reports the same state twice.
func checkEventsOnce(t testing.TB, tasks podiumv1connect.TaskServiceClient, id string) {
	t.Helper()
	stream, err := tasks.Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: id}))
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	defer stream.Close()
	type key struct {
		attempt int32
		stream  podiumv1.LogStream
	}
	next := map[key]uint64{}
	states := map[int32][]podiumv1.TaskState{}
	var seq uint64
	for stream.Receive() {
		m := stream.Msg()
		if m.GetEvent() == nil {
			continue
		}
		if m.GetSeq() != seq+1 {
			t.Errorf("task %s: event at position %d follows position %d", id, m.GetSeq(), seq)
		}
		seq = m.GetSeq()
		ev := m.GetEvent()
		if l := ev.GetLog(); l != nil {
			k := key{ev.GetAttempt(), l.GetStream()}
			if l.GetOffset() != next[k] {
				t.Errorf("task %s attempt %d: a %s chunk at offset %d, where the stored chunks before it end at %d", id, k.attempt, k.stream, l.GetOffset(), next[k])
			}
			next[k] = l.GetOffset() + uint64(len(l.GetData()))
		}
		if st := ev.GetStatus(); st != nil {
			if slices.Contains(states[ev.GetAttempt()], st.GetState()) {
				t.Errorf("task %s attempt %d: %s stored again after %v", id, ev.GetAttempt(), st.GetState(), states[ev.GetAttempt()])
			}
			states[ev.GetAttempt()] = append(states[ev.GetAttempt()], st.GetState())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
}

// TestCoordinatorKilledMidBurst SIGKILLs the replica that takes a burst of
// concurrent submits and holds the node's stream, while tasks it placed are
// printing (their log events in flight from the agent) and further submits
// are still arriving; the submitters then go to the second replica. Every
// submit that was answered with a task id must exist afterwards as that
// very task, run to its own end with its own code, and have its output
// stored exactly once: each line once, in order, matching the task's own
// checksum. A submit that was not answered may or may not have made a
// task, but never more than one.
func TestCoordinatorKilledMidBurst(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	a := StartReplica(t, db.URL)
	b := StartReplica(t, db.URL)
	ag := EnrollAgent(t, a, a.URL())
	ag.Start()
	a.WaitOnlineOn(t, ag.Node)
	waitKept(t, ag, b)
	image := dockertest.EnsureImage(t)
	hc := coordtest.HTTPClient()
	ta, tb := coordtest.TaskClient(hc, a.URL()), coordtest.TaskClient(hc, b.URL())

	var (
		mu       sync.Mutex
		acked    []submitted
		attempts int
	)
	workload := func() Workload {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		return Workload{Lines: 10, Every: 200 * time.Millisecond, Code: attempts % 4}
	}
	ack := func(id string, w Workload) int {
		mu.Lock()
		defer mu.Unlock()
		acked = append(acked, submitted{id, w})
		return len(acked)
	}

	// The first wave is placed, and starts printing, before the fault.
	const first = 8
	var g sync.WaitGroup
	for range first {
		g.Go(func() {
			w := workload()
			id, err := submitWorkload(ta, image, w)
			if err != nil {
				t.Errorf("submit to %s before any fault: %v", a.Addr, err)
				return
			}
			ack(id, w)
		})
	}
	g.Wait()
	if t.Failed() {
		t.FailNow()
	}
	wait.For(t, runWithin, "two tasks of the first wave to run", func() bool {
		res, err := ta.List(context.Background(), connect.NewRequest(&podiumv1.ListRequest{States: []podiumv1.TaskState{podiumv1.TaskState_TASK_STATE_RUNNING}}))
		return err == nil && len(res.Msg.Tasks) >= 2
	})

	// The second wave submits without pause to A until A fails it, then
	// once more to B; A is SIGKILLed once a few of its submits were
	// answered, so that others are in flight.
	const submitters, perSubmitter, killAfter = 4, 6, first + 4
	killNow := make(chan struct{})
	var once sync.Once
	for range submitters {
		g.Go(func() {
			for range perSubmitter {
				w := workload()
				id, err := submitWorkload(ta, image, w)
				if err != nil {
					break
				}
				if ack(id, w) >= killAfter {
					once.Do(func() { close(killNow) })
				}
			}
			w := workload()
			id, err := submitWorkload(tb, image, w)
			if err != nil {
				t.Errorf("submit to %s after %s died: %v", b.Addr, a.Addr, err)
				return
			}
			ack(id, w)
		})
	}
	wait.Closed(t, runWithin, "a few submits of the second wave to be answered", killNow)
	a.Kill()
	g.Wait()
	running, err := tb.List(context.Background(), connect.NewRequest(&podiumv1.ListRequest{States: []podiumv1.TaskState{podiumv1.TaskState_TASK_STATE_RUNNING}}))
	if err != nil {
		t.Fatalf("list running tasks at %s: %v", b.Addr, err)
	}
	t.Logf("%d submits, %d answered with a task id; %d tasks running just after the kill", attempts, len(acked), len(running.Msg.Tasks))

	b.WaitOnlineOn(t, ag.Node)
	for _, s := range acked {
		tk := waitEnded(t, tb, s.id)
		if got := tk.GetSpec().GetCommand(); len(got) != 3 || got[2] != s.w.Script() {
			t.Errorf("task %s runs %q, not the workload it was submitted with", s.id, got)
			continue
		}
		s.w.checkStored(t, b, tk)
		checkEventsOnce(t, tb, s.id)
	}
	res, err := tb.List(context.Background(), connect.NewRequest(&podiumv1.ListRequest{Limit: 1000}))
	if err != nil {
		t.Fatalf("list tasks at %s: %v", b.Addr, err)
	}
	t.Logf("%d tasks exist", len(res.Msg.Tasks))
	if len(res.Msg.Tasks) > attempts {
		t.Errorf("%d tasks exist after %d submits: a submit made more than one", len(res.Msg.Tasks), attempts)
	}
	// A submit cut by the kill may have made a task nobody heard of: it
	// runs like any other, and must end too before nothing is left.
	for _, tk := range res.Msg.Tasks {
		waitEnded(t, tb, tk.Id)
	}
	NothingLeft(t, ag.Node)
}
