package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// finishedTasks are n tasks that each ran and succeeded, each with the same
// few events, sorted by id.
func finishedTasks(t *testing.T, n int) (*ingestFixture, []string) {
	t.Helper()
	f, tasks := newIngestFixture(t, 1, n)
	zero := int32(0)
	var items []store.IngestItem
	for _, id := range tasks {
		done := statusEv(4, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
		done.GetStatus().ExitCode = &zero
		items = append(items, f.item(id, statusEv(1, podiumv1.TaskState_TASK_STATE_PROVISIONING),
			statusEv(2, podiumv1.TaskState_TASK_STATE_RUNNING), logEv(3, "hello "+id), done))
	}
	out, err := f.st.IngestBatch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o.Err != nil || o.Result.Stored != 4 {
			t.Fatalf("item %d: %+v, want 4 events stored", i, o)
		}
	}
	slices.Sort(tasks)
	return f, tasks
}

func eventCount(t *testing.T, f *ingestFixture, id string) int {
	t.Helper()
	var n int
	if err := f.sql.QueryRow(context.Background(), `select count(*) from podium.task_events where task_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// One pass's archives are recorded in one transaction, each by the rules of
// one: recorded where the task is still as read (replacing its previous
// archive, or as a row without an object store), and not recorded, its new
// object queued for deletion, where the log changed since it was read, where
// retention removed the log meanwhile, or where the task is gone.
func TestRecordArchivesMixedOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, tasks := finishedTasks(t, 4)
	replaced, changed, expired, inDB := tasks[0], tasks[1], tasks[2], tasks[3]
	gone := "task_gone"
	// replaced holds a previous archive of its first two events, and the
	// key about to be written was queued by a pass that could not record it.
	oldKey, size, sha := "logs/"+replaced+"/old", int64(10), "00"
	if _, err := f.sql.Exec(ctx, `update podium.tasks set log_archived_seq = 2, log_archive_key = $2,
		log_archive_size = 10, log_archive_sha256 = '00' where id = $1`, replaced, oldKey); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sql.Exec(ctx, `delete from podium.task_events where task_id = $1 and seq <= 2`, replaced); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sql.Exec(ctx, `update podium.tasks set log_expired_at = now() where id = $1`, expired); err != nil {
		t.Fatal(err)
	}
	var last int64 // the same for all: the same events
	if err := f.sql.QueryRow(ctx, `select last_seq from podium.tasks where id = $1`, replaced).Scan(&last); err != nil {
		t.Fatal(err)
	}
	newKey := func(id string, last int64) string { return fmt.Sprintf("logs/%s/%d", id, last) }
	if _, err := f.sql.Exec(ctx, `insert into podium.object_deletions (key) values ($1)`, newKey(replaced, last)); err != nil {
		t.Fatal(err)
	}
	cand := func(id string, last int64) store.ArchiveCandidate {
		return store.ArchiveCandidate{ID: id, LastSeq: last}
	}
	cands := []store.ArchiveCandidate{
		{ID: replaced, LastSeq: last, Archive: store.LogArchive{Seq: 2, Key: &oldKey, Size: &size, SHA256: &sha}},
		cand(changed, last-1), // read before its last event
		cand(expired, last), cand(inDB, last), cand(gone, last),
	}

	// The pass reads every task's rows past its archive, up to what it read
	// as the last, in one query, by task.
	var read []string
	err := f.st.ArchiveEvents(ctx, cands, func(id string, e store.StoredEvent) error {
		read = append(read, id+":"+string(rune('0'+e.Seq)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range cands {
		for seq := c.Archive.Seq + 1; seq <= c.LastSeq && c.ID != gone; seq++ {
			want = append(want, c.ID+":"+string(rune('0'+seq)))
		}
	}
	slices.Sort(want)
	if !slices.Equal(read, want) {
		t.Fatalf("read %v, want %v", read, want)
	}

	var rs []store.ArchiveRecord
	for _, c := range cands {
		r := store.ArchiveRecord{Candidate: c, Size: 42, SHA256: "ab" + c.ID}
		if c.ID == inDB {
			r.Data = []byte("archive of " + c.ID)
		} else {
			r.Key = newKey(c.ID, c.LastSeq)
		}
		rs = append(rs, r)
	}
	ok, err := f.st.RecordArchives(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if wantOK := []bool{true, false, false, true, false}; !slices.Equal(ok, wantOK) {
		t.Fatalf("recorded %v, want %v (replaced, changed, expired, in the database, gone)", ok, wantOK)
	}

	for _, id := range []string{replaced, inDB} {
		task, err := f.st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		a := task.Archive
		if a.Seq != last || a.At == nil || *a.Size != 42 || *a.SHA256 != "ab"+id {
			t.Errorf("task %s: archive %+v, want position %d, size 42, sha ab%s, archived now", id, a, last, id)
		}
		if n := eventCount(t, f, id); n != 0 {
			t.Errorf("task %s: %d rows left, want none", id, n)
		}
		switch id {
		case replaced:
			if a.Key == nil || *a.Key != newKey(id, last) {
				t.Errorf("task %s: key %v, want %s", id, a.Key, newKey(id, last))
			}
		case inDB:
			if a.Key != nil {
				t.Errorf("task %s: key %s, want none (a row)", id, *a.Key)
			}
			data, err := f.st.LogArchiveData(ctx, id)
			if err != nil || string(data) != "archive of "+id {
				t.Errorf("task %s: archive row %q (%v), want the data recorded", id, data, err)
			}
		}
	}
	for _, id := range []string{changed, expired} {
		task, err := f.st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Archive.Archived() || task.Archive.At != nil {
			t.Errorf("task %s: archive %+v recorded, want none", id, task.Archive)
		}
	}
	if n := eventCount(t, f, changed); n != int(last) {
		t.Errorf("task %s: %d rows, want its %d kept", changed, n, last)
	}
	rows, err := f.sql.Query(ctx, `select key from podium.object_deletions order by key`)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	wantQueued := []string{oldKey, newKey(changed, last-1), newKey(expired, last), newKey(gone, last)}
	slices.Sort(wantQueued)
	if !slices.Equal(queued, wantQueued) {
		t.Errorf("queued for deletion %v, want %v (the replaced archive and the objects not recorded)", queued, wantQueued)
	}

	// A second pass that wrote the same archives records none of them, and
	// queues none of the objects the tasks name.
	ok, err = f.st.RecordArchives(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ok, true) {
		t.Errorf("a second pass recorded %v, want nothing", ok)
	}
	var named int
	if err := f.sql.QueryRow(ctx, `select count(*) from podium.object_deletions where key = $1`, newKey(replaced, last)).Scan(&named); err != nil || named != 0 {
		t.Errorf("the object task %s names is queued for deletion (%d, %v)", replaced, named, err)
	}
}

// The deletion of a pass's archived rows reads task_events by its primary
// key, one range per task, whatever the table's size: a sequential scan
// would read every task's log on every pass.
func TestDeleteArchivedEventsUsesThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := openStore(t)
	pool := rawSQL(t, db)
	var plan []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "set local enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "explain "+store.DeleteArchivedEventsSQL, []string{"a", "b"}, []int64{4, 5})
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "task_events_pkey") {
		t.Errorf("the deletion of archived rows does not use task_events_pkey:\n%s", p)
	}
}
