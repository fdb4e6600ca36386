package logarchive_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// archiveInPostgres stores a finished task whose log (n events of
// incompressible output) is archived in Postgres, as the archive job leaves
// it without an object store, and returns the task and its events.
func archiveInPostgres(t *testing.T, st *store.Store, url string, n int) (store.Task, []*podiumv1.TaskEvent) {
	t.Helper()
	ctx := context.Background()
	const id = "task_01J0000000000000000000PAGE"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `insert into podium.tasks (id, spec, state, last_seq) values ($1, '{}', 'succeeded', $2)`, id, n); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc, err := logarchive.NewEncoder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	events := make([]*podiumv1.TaskEvent, n)
	for i := range events {
		data := make([]byte, 3000)
		_, _ = rand.Read(data)
		events[i] = &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Data: data}}}
		if err := enc.Write(uint64(i+1), events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	ok, err := st.RecordArchive(ctx, store.ArchiveRecord{Candidate: store.ArchiveCandidate{ID: id, LastSeq: int64(n)},
		Data: buf.Bytes(), Size: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:])})
	if err != nil || !ok {
		t.Fatalf("record the archive: %v %v", ok, err)
	}
	task, err := st.GetTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !task.Archive.InDatabase() {
		t.Fatalf("the task's archive %+v is not in Postgres", task.Archive)
	}
	return task, events
}

// An archive kept in Postgres is read a page at a time: a log of a few
// hundred pages reads back byte-exact while the reader never holds more
// than one page of it (its own count, MaxHeld), checked whole before a byte
// is decoded and decoded from the start or from any position.
func TestArchiveInPostgresIsReadInPages(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	task, events := archiveInPostgres(t, st, db.URL, 300)
	const page = 4096
	if *task.Archive.Size < 100*page {
		t.Fatalf("the archive is %d bytes, want more than 100 pages of %d", *task.Archive.Size, page)
	}
	r := logarchive.NewReaderPaged(st, nil, page)
	for _, after := range []int64{0, 150, 299, 300} {
		var got []*podiumv1.TaskEvent
		err := r.Events(context.Background(), task.ID, task.Archive, after, func(seq int64, ev *podiumv1.TaskEvent) error {
			if seq != after+int64(len(got))+1 {
				t.Fatalf("position %d after %d events from %d", seq, len(got), after)
			}
			ev.TaskId = ""
			got = append(got, ev)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := events[after:]
		if len(got) != len(want) {
			t.Fatalf("from %d: %d events, want %d", after, len(got), len(want))
		}
		for i := range got {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("from %d: event %d differs from the one archived", after, after+int64(i)+1)
			}
		}
	}
	if held := r.MaxHeld(); held <= 0 || held > page {
		t.Errorf("the reader held %d bytes of the archive at once, want one page (%d) at most", held, page)
	}
}

// An archive replaced since the task was read (its SHA-256 is another now)
// is ErrReplaced, and one whose bytes are not those recorded is ErrDamaged;
// either way fn sees nothing.
func TestArchivePagesReplacedOrDamaged(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	task, _ := archiveInPostgres(t, st, db.URL, 20)
	r := logarchive.NewReaderPaged(st, nil, 1024)
	seen := func(int64, *podiumv1.TaskEvent) error {
		t.Fatal("an event of an archive that is not the one recorded was decoded")
		return nil
	}
	other := task.Archive
	sha := "00" + (*other.SHA256)[2:]
	other.SHA256 = &sha
	if err := r.Events(context.Background(), task.ID, other, 0, seen); !errors.Is(err, logarchive.ErrReplaced) {
		t.Errorf("an archive replaced since the task was read: %v, want ErrReplaced", err)
	}
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `update podium.task_log_archives set data = overlay(data placing '\xff'::bytea from 2000) where task_id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Events(context.Background(), task.ID, task.Archive, 0, seen); !errors.Is(err, logarchive.ErrDamaged) {
		t.Errorf("an archive changed in Postgres: %v, want ErrDamaged", err)
	}
}
