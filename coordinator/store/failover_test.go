package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// A failover to an asynchronous standby loses the last commits, and with
// them events the coordinator had stored and acknowledged: the node dropped
// them on the ack and cannot send them again. Its next batch starts past the
// attempt's stored high-water mark. The coordinator must go on from there —
// store what the node still has, say in the task's log how many events were
// lost and why, and let the task end — instead of waiting for events that
// will never come (the task hung forever, the node re-sending every 30 s).
//
// The loss is real: a primary and an asynchronous standby of its own, the
// standby stopped while the primary acknowledges the events, the primary
// quit (immediate), the standby started and promoted, and the store reaching
// it through the multi-host URL with target_session_attrs=read-write.
func TestIngestAfterAFailoverLostAcknowledgedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := pgtest.NewCluster(t)
	onPrimary := pgtest.NewDatabaseIn(t, primary)
	standby := pgtest.NewStandby(t, primary, false)
	db := pgtest.Database{Name: onPrimary.Name, URL: pgtest.MultiHostURL(onPrimary.Name, primary, standby.Cluster)}
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f, tasks := newIngestFixtureOn(t, st, db, 1, 1)
	task := tasks[0]

	// Stored and replicated: the standby has these.
	ingestOK(t, f, f.item(task, statusEv(1, podiumv1.TaskState_TASK_STATE_RUNNING), logEv(2, "line 1\n")), 2)
	standby.WaitReplayed(t, primary)
	if err := standby.Down("fast"); err != nil {
		t.Fatal(err)
	}
	// Stored and acknowledged (the node drops them), never replicated.
	ingestOK(t, f, f.item(task, logEv(3, "line 2\n"), logEv(4, "line 3\n")), 4)
	if err := primary.Down("immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Up(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}

	// The node sends what it still has: from seq 5 on, the task's end.
	zero := int32(0)
	done := statusEv(6, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	done.GetStatus().ExitCode = &zero
	var out []store.IngestOutcome
	wait.For(t, 60*time.Second, "an ingest on the promoted standby", func() bool {
		out, err = f.st.IngestBatch(ctx, []store.IngestItem{f.item(task, logEv(5, "line 4\n"), done)})
		return err == nil
	})
	if o := out[0]; o.Err != nil || o.Result.Acked != 6 || o.Result.Stored != 2 || o.Result.Lost != 2 || o.Result.Terminal != store.Succeeded {
		t.Fatalf("after the failover the node's events from seq 5 gave %+v (err %v); want acked 6, 2 stored, 2 lost, the task succeeded", o.Result, o.Err)
	}
	tk, err := f.st.GetTask(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != store.Succeeded || tk.ExitCode == nil || *tk.ExitCode != 0 {
		t.Errorf("task %s, exit %v; want succeeded with 0", tk.State, tk.ExitCode)
	}
	evs, err := f.st.ReadEvents(ctx, task, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var prev int64
	for _, e := range evs {
		switch b := e.Event.GetBody().(type) {
		case *podiumv1.TaskEvent_Status:
			got = append(got, store.StateName(b.Status.GetState()))
		case *podiumv1.TaskEvent_Log:
			got = append(got, string(b.Log.GetData()))
		default:
			got = append(got, "note")
			if text := e.Event.GetNote().GetText(); !strings.Contains(text, "2 events") || !strings.Contains(text, "database") {
				t.Errorf("the note says %q; want how many events were lost and that the database lost them", text)
			}
		}
		if e.Seq <= prev {
			t.Errorf("event at seq %d after %d", e.Seq, prev)
		}
		prev = e.Seq
	}
	if prev != tk.LastSeq {
		t.Errorf("the last event is at seq %d, the task's last_seq is %d: a follower would wait for more", prev, tk.LastSeq)
	}
	want := fmt.Sprint([]string{"scheduled", "running", "line 1\n", "note", "line 4\n", "succeeded"})
	if fmt.Sprint(got) != want {
		t.Errorf("the task's log is %q, want %q", got, want)
	}
}

// ingestOK ingests one item and checks it was stored up to acked.
func ingestOK(t *testing.T, f *ingestFixture, it store.IngestItem, acked uint64) {
	t.Helper()
	out, err := f.st.IngestBatch(context.Background(), []store.IngestItem{it})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Result.Acked != acked {
		t.Fatalf("ingest: %+v, want acked %d", out[0], acked)
	}
}
