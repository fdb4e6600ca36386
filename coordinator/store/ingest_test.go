package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// ingestFixture is nodes with live sessions and tasks assigned to them, the
// way the scheduler leaves them.
type ingestFixture struct {
	st     *store.Store
	sql    *pgxpool.Pool
	epochs map[string]int64
	onNode map[string]string // task → node
}

func newIngestFixture(t *testing.T, nodes, tasks int) (*ingestFixture, []string) {
	t.Helper()
	st, db := openStore(t)
	return newIngestFixtureOn(t, st, db, nodes, tasks)
}

// newIngestFixtureOn is newIngestFixture with a store the test opened on db.
func newIngestFixtureOn(t *testing.T, st *store.Store, db pgtest.Database, nodes, tasks int) (*ingestFixture, []string) {
	t.Helper()
	ctx := context.Background()
	f := &ingestFixture{st: st, sql: rawSQL(t, db), epochs: map[string]int64{}, onNode: map[string]string{}}
	for i := range nodes {
		id := fmt.Sprintf("node_%02d", i)
		if _, err := f.sql.Exec(ctx, "insert into podium.nodes (id, key_hash) values ($1, '\\x00')", id); err != nil {
			t.Fatal(err)
		}
		n, err := st.StartSession(ctx, store.SessionStart{NodeID: id, Replica: "r1", MaxTasks: 100})
		if err != nil {
			t.Fatal(err)
		}
		f.epochs[id] = n.SessionEpoch
	}
	var in []store.NewTask
	for range tasks {
		in = append(in, store.NewTask{ID: ids.New("task"), Spec: &podiumv1.TaskSpec{Image: "busybox"}})
	}
	if _, err := st.InsertTasks(ctx, in); err != nil {
		t.Fatal(err)
	}
	placed, _ := runPass(t, st, tasks)
	if len(placed) != tasks {
		t.Fatalf("placed %d of %d", len(placed), tasks)
	}
	var taskIDs []string
	for _, p := range placed {
		f.onNode[p.TaskID] = p.NodeID
		taskIDs = append(taskIDs, p.TaskID)
	}
	return f, taskIDs
}

func (f *ingestFixture) item(task string, events ...*podiumv1.TaskEvent) store.IngestItem {
	node := f.onNode[task]
	return store.IngestItem{NodeID: node, Epoch: f.epochs[node], TaskID: task, Attempt: 1, Events: events}
}

func statusEv(seq uint64, s podiumv1.TaskState) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
}

func logEv(seq uint64, text string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Seq: seq, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Data: []byte(text)}}}
}

// One batch carries many nodes' events: each task moves through every status
// change it was sent, in order, its log is stored once in order, and a batch
// sent again stores nothing twice.
func TestIngestBatchManyTasksInOrderAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 3, 6)
	zero := int32(0)
	var items []store.IngestItem
	for _, id := range tasks {
		done := statusEv(4, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
		done.GetStatus().ExitCode = &zero
		items = append(items, f.item(id,
			statusEv(1, podiumv1.TaskState_TASK_STATE_PROVISIONING),
			statusEv(2, podiumv1.TaskState_TASK_STATE_RUNNING),
			logEv(3, "hello "+id), done))
	}
	for round := range 2 {
		out, err := f.st.IngestBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			want := 4
			if round == 1 {
				want = 0 // the replay
			}
			if o.Err != nil || o.Result.Acked != 4 || o.Result.Stored != want {
				t.Errorf("round %d item %d: %+v, want acked 4, stored %d", round, i, o, want)
			}
			if round == 0 && o.Result.Terminal != store.Succeeded {
				t.Errorf("item %d: terminal %q, want succeeded", i, o.Result.Terminal)
			}
		}
	}
	for _, id := range tasks {
		task, err := f.st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != store.Succeeded || task.StartedAt == nil || task.FinishedAt == nil || task.ExitCode == nil || *task.ExitCode != 0 {
			t.Errorf("task %s: state %s, started %v, finished %v, exit %v", id, task.State, task.StartedAt, task.FinishedAt, task.ExitCode)
		}
		evs, err := f.st.ReadEvents(ctx, id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			switch b := e.Event.GetBody().(type) {
			case *podiumv1.TaskEvent_Status:
				got = append(got, store.StateName(b.Status.GetState()))
			case *podiumv1.TaskEvent_Log:
				got = append(got, string(b.Log.GetData()))
			default:
				got = append(got, "note: "+e.Event.GetNote().GetText())
			}
			if e.Seq != int64(len(got)) {
				t.Errorf("task %s: event %d has seq %d: the log has a gap or a repeat", id, len(got), e.Seq)
			}
		}
		want := fmt.Sprint([]string{"scheduled", "provisioning", "running", "hello " + id, "succeeded"})
		if fmt.Sprint(got) != want {
			t.Errorf("task %s log %v, want %s", id, got, want)
		}
	}
}

// An item the batch must refuse — a stale session, a task its node does not
// hold — or stop short — a gap inside it, stored up to the gap — costs only
// that item; the others in the batch are stored.
func TestIngestBatchRefusesItemsOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 2, 4)
	stale := f.item(tasks[0], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING))
	stale.Epoch--
	notHeld := f.item(tasks[1], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING))
	notHeld.NodeID = "node_99"
	notHeld.Epoch = 0
	wrongNode := f.item(tasks[1], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING))
	for n := range f.epochs {
		if n != f.onNode[tasks[1]] {
			wrongNode.NodeID, wrongNode.Epoch = n, f.epochs[n]
		}
	}
	gap := f.item(tasks[2], statusEv(1, podiumv1.TaskState_TASK_STATE_PROVISIONING), statusEv(3, podiumv1.TaskState_TASK_STATE_RUNNING))
	good := f.item(tasks[3], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING))
	out, err := f.st.IngestBatch(ctx, []store.IngestItem{stale, notHeld, wrongNode, gap, good})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{store.ErrStaleEpoch, store.ErrNotFound, store.ErrNotHeld, nil, nil} {
		if !errors.Is(out[i].Err, want) {
			t.Errorf("item %d: err %v, want %v", i, out[i].Err, want)
		}
	}
	if out[3].Result.Stored != 1 || out[3].Result.Acked != 1 {
		t.Errorf("the item with a gap stored %d, acked %d; want seq 1 and nothing past the gap", out[3].Result.Stored, out[3].Result.Acked)
	}
	if out[4].Result.Stored != 1 {
		t.Errorf("the good item stored %d events, want 1", out[4].Result.Stored)
	}
	for i, want := range []string{store.Scheduled, store.Scheduled, store.Provisioning, store.Running} {
		task, err := f.st.GetTask(ctx, tasks[i])
		if err != nil {
			t.Fatal(err)
		}
		if task.State != want {
			t.Errorf("task %d is %s, want %s", i, task.State, want)
		}
	}
}

// A status the lifecycle does not allow is kept as a note in its place, and a
// node's "cancelled" for a task stopped for its timeout is a failure.
func TestIngestBatchLateStatusAndTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 1, 2)
	if _, err := f.sql.Exec(ctx, "update podium.tasks set cancel_reason = 'timeout' where id = $1", tasks[1]); err != nil {
		t.Fatal(err)
	}
	out, err := f.st.IngestBatch(ctx, []store.IngestItem{
		f.item(tasks[0], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), statusEv(2, podiumv1.TaskState_TASK_STATE_PROVISIONING)),
		f.item(tasks[1], statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), statusEv(2, podiumv1.TaskState_TASK_STATE_CANCELLED)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Result.Stored != 2 || out[1].Result.Terminal != store.Failed {
		t.Fatalf("outcomes %+v", out)
	}
	evs, err := f.st.ReadEvents(ctx, tasks[0], 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Event.GetNote().GetText()
	if want := `ignored a late "provisioning" from the node: the task is already running`; last != want {
		t.Errorf("last event %q, want the note %q", last, want)
	}
	task, err := f.st.GetTask(ctx, tasks[1])
	if err != nil {
		t.Fatal(err)
	}
	if task.State != store.Failed || task.Reason != "timeout" {
		t.Errorf("timed-out task is %s (%q), want failed (timeout)", task.State, task.Reason)
	}
}

// A batch carrying a lot of output goes in by COPY (copyEventsMinBytes), and
// stores exactly what an insert would: every kind of event, with its nulls,
// byte for byte, in order, once however often the batch is sent.
func TestIngestBatchLargeOutputStoredExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := newIngestFixture(t, 2, 2)
	zero := int32(0)
	chunk := func(task string, k int) []byte {
		b := make([]byte, 64<<10)
		for i := range b {
			b[i] = byte(i*7 + k + len(task))
		}
		return b
	}
	const chunks = 5 // two tasks of 5×64 KiB: well past the COPY threshold
	var items []store.IngestItem
	for _, id := range tasks {
		evs := []*podiumv1.TaskEvent{
			statusEv(1, podiumv1.TaskState_TASK_STATE_PROVISIONING),
			statusEv(2, podiumv1.TaskState_TASK_STATE_RUNNING),
		}
		for k := range chunks {
			evs = append(evs, &podiumv1.TaskEvent{Seq: uint64(3 + k), Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{
				Offset: uint64(k << 16), Data: chunk(id, k)}}})
		}
		evs = append(evs,
			&podiumv1.TaskEvent{Seq: 3 + chunks, Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{
				Stream: podiumv1.LogStream_LOG_STREAM_STDERR, Data: []byte("warning\n")}}},
			&podiumv1.TaskEvent{Seq: 4 + chunks, Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: "a note"}}})
		done := statusEv(5+chunks, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
		done.GetStatus().ExitCode = &zero
		items = append(items, f.item(id, append(evs, done)...))
	}
	for round := range 2 {
		out, err := f.st.IngestBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			want := 5 + chunks
			if round == 1 {
				want = 0
			}
			if o.Err != nil || o.Result.Acked != 5+chunks || o.Result.Stored != want {
				t.Errorf("round %d item %d: %+v, want acked %d, stored %d", round, i, o, 5+chunks, want)
			}
		}
	}
	for _, id := range tasks {
		evs, err := f.st.ReadEvents(ctx, id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		// scheduled (the placement's), provisioning, running, the chunks,
		// stderr, the note, succeeded.
		if len(evs) != 6+chunks {
			t.Fatalf("task %s: %d events, want %d", id, len(evs), 6+chunks)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Errorf("task %s: event %d has seq %d", id, i, e.Seq)
			}
		}
		for k := range chunks {
			l := evs[3+k].Event.GetLog()
			if l.GetStream() != podiumv1.LogStream_LOG_STREAM_STDOUT || l.GetOffset() != uint64(k<<16) || string(l.GetData()) != string(chunk(id, k)) {
				t.Errorf("task %s chunk %d: stream %v offset %d, %d bytes: not what was sent", id, k, l.GetStream(), l.GetOffset(), len(l.GetData()))
			}
		}
		if l := evs[3+chunks].Event.GetLog(); l.GetStream() != podiumv1.LogStream_LOG_STREAM_STDERR || string(l.GetData()) != "warning\n" {
			t.Errorf("task %s: stderr event %v", id, evs[3+chunks].Event)
		}
		if n := evs[4+chunks].Event.GetNote().GetText(); n != "a note" {
			t.Errorf("task %s: note %q", id, n)
		}
		s := evs[5+chunks].Event.GetStatus()
		if s.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || s.ExitCode == nil || *s.ExitCode != 0 {
			t.Errorf("task %s: last event %v, want succeeded with exit code 0", id, evs[5+chunks].Event)
		}
	}
}
