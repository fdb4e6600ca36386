package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/logarchive"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// noArchive keeps a replica's own archive job off, for tests that run passes
// themselves (archivePass) and so know exactly when the archive happens.
var noArchive = logarchive.Config{Disabled: true}

// fastArchive is the leader's job archiving as soon as a task has ended.
var fastArchive = logarchive.Config{After: time.Millisecond, Interval: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}

// finishWithOutput has the node holding taskID (attempt 1, seqs 1 and 2 sent)
// print binary stdout, stderr and a note, and fail with exit 3.
func finishWithOutput(t *testing.T, ctx context.Context, r *coordtest.Replica, node *simNode, taskID string) {
	t.Helper()
	exit := int32(3)
	bin := string([]byte{0, 0xff, 0xfe, 0x80, '\n', 0xc3, 0x28})
	node.send(t,
		logEv(taskID, 1, 3, 0, podiumv1.LogStream_LOG_STREAM_STDOUT, "hello "+bin),
		logEv(taskID, 1, 4, 0, podiumv1.LogStream_LOG_STREAM_STDERR, "warning: ünïcode\n"),
		&podiumv1.TaskEvent{TaskId: taskID, Attempt: 1, Seq: 5, Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: "image pulled"}}},
		logEv(taskID, 1, 6, uint64(len("hello "+bin)), podiumv1.LogStream_LOG_STREAM_STDOUT, "more\x00bytes"),
		status(taskID, 1, 7, podiumv1.TaskState_TASK_STATE_FAILED, &exit))
	waitState(t, ctx, r, taskID, podiumv1.TaskState_TASK_STATE_FAILED)
}

// readLog reads a task's whole log through Events, without following.
func readLog(t *testing.T, ctx context.Context, r *coordtest.Replica, id string) []*podiumv1.EventsResponse {
	t.Helper()
	evs, err := tryReadLog(ctx, r, id, false)
	if err != nil {
		t.Fatalf("read the log of %s: %v", id, err)
	}
	return evs
}

func tryReadLog(ctx context.Context, r *coordtest.Replica, id string, follow bool) ([]*podiumv1.EventsResponse, error) {
	st, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: id, Follow: follow}))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []*podiumv1.EventsResponse
	for st.Receive() {
		if st.Msg().GetEvent() != nil {
			out = append(out, st.Msg())
		}
	}
	return out, st.Err()
}

// sameLog fails unless two reads of a log are the same events at the same
// positions, field for field.
func sameLog(t *testing.T, got, want []*podiumv1.EventsResponse) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("event %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func dbCount(t *testing.T, ctx context.Context, url, query string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func eventRows(t *testing.T, ctx context.Context, url, taskID string) int {
	t.Helper()
	return dbCount(t, ctx, url, "select count(*) from podium.task_events where task_id = $1", taskID)
}

// archivePass runs passes of an archive job of the test's own on r's store
// and object store until taskID's log is archived up to its end.
func archivePass(t *testing.T, ctx context.Context, r *coordtest.Replica, taskID string) *podiumv1.LogArchive {
	t.Helper()
	j := logarchive.New(logarchive.Config{After: time.Millisecond}, logarchive.Deps{Store: r.Store(), Objects: r.Artifacts()})
	var a *podiumv1.LogArchive
	coordtest.Eventually(t, 30*time.Second, "a pass to archive the log of "+taskID, func() bool {
		if _, err := j.Pass(ctx); err != nil {
			t.Fatalf("archive pass: %v", err)
		}
		tk := getTask(t, ctx, r, taskID)
		a = tk.GetLogArchive()
		return a != nil && a.ArchivedSeq == tk.LastSeq && a.ArchivedAt != nil
	})
	return a
}

func objectBytes(t *testing.T, ctx context.Context, s *s3test.Server, key string) []byte {
	t.Helper()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, testBucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read object %s: %v", key, err)
	}
	return b
}

// A finished task's log, binary output, stderr, notes and status changes,
// reads back byte for byte and field for field once it is one object in the
// store and its rows are gone; the object is what the task records. A note
// appended afterwards (a late artifact) is a row that reads after the
// archive, and the next pass folds it into a new archive, queueing the old
// object for deletion.
func TestLogArchiveRoundTripThroughTheObjectStore(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3), Archive: noArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitReady(t, r)
	node, taskID := heldTask(t, ctx, r)
	finishWithOutput(t, ctx, r, node, taskID)
	before := readLog(t, ctx, r, taskID)
	if len(before) < 7 {
		t.Fatalf("the log has %d events before the archive, want at least 7", len(before))
	}

	a := archivePass(t, ctx, r, taskID)
	if a.Key != fmt.Sprintf("tasks/%s/log-%d.zst", taskID, a.ArchivedSeq) || a.InDatabase {
		t.Fatalf("archive %v: want the key tasks/%s/log-%d.zst", a, taskID, a.ArchivedSeq)
	}
	if n := eventRows(t, ctx, db.URL, taskID); n != 0 {
		t.Fatalf("%d task_events rows left after the archive, want 0", n)
	}
	obj := objectBytes(t, ctx, s3, a.Key)
	if digest(obj) != a.Sha256 || int64(len(obj)) != a.Size {
		t.Fatalf("object %s: %d bytes, sha256 %s; the task records %d bytes, sha256 %s", a.Key, len(obj), digest(obj), a.Size, a.Sha256)
	}
	sameLog(t, readLog(t, ctx, r, taskID), before)

	// A late note: a row past the archive, read after it, and the task back
	// in the job's queue.
	if err := r.Store().AppendNote(ctx, taskID, 1, "artifact late.bin stored"); err != nil {
		t.Fatal(err)
	}
	tk := getTask(t, ctx, r, taskID)
	if tk.GetLogArchive().GetArchivedAt() != nil || tk.GetLogArchive().GetArchivedSeq() != a.ArchivedSeq {
		t.Fatalf("after a note: archive %v, want the old one with no archived_at (queued again)", tk.GetLogArchive())
	}
	withNote := readLog(t, ctx, r, taskID)
	sameLog(t, withNote[:len(before)], before)
	if len(withNote) != len(before)+1 || withNote[len(before)].GetEvent().GetNote().GetText() != "artifact late.bin stored" ||
		withNote[len(before)].Seq != a.ArchivedSeq+1 {
		t.Fatalf("after a note the log reads %v, want the archive then the note at %d", withNote[len(before):], a.ArchivedSeq+1)
	}
	b := archivePass(t, ctx, r, taskID)
	if b.ArchivedSeq != a.ArchivedSeq+1 || b.Key == a.Key {
		t.Fatalf("re-archive %v after %v: want it to hold the note, under a new key", b, a)
	}
	if n := dbCount(t, ctx, db.URL, "select count(*) from podium.object_deletions where key = $1", a.Key); n != 1 {
		t.Fatalf("the replaced archive %s is queued for deletion %d times, want once", a.Key, n)
	}
	if n := dbCount(t, ctx, db.URL, "select count(*) from podium.object_deletions where key = $1", b.Key); n != 0 {
		t.Fatalf("the current archive %s is queued for deletion", b.Key)
	}
	if n := eventRows(t, ctx, db.URL, taskID); n != 0 {
		t.Fatalf("%d task_events rows left after the re-archive, want 0", n)
	}
	sameLog(t, readLog(t, ctx, r, taskID), withNote)
}

// Without an object store, the archive is a compressed row of
// podium.task_log_archives, read back the same way, and replaced in place.
func TestLogArchiveInPostgresWithoutAnObjectStore(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Archive: noArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)
	finishWithOutput(t, ctx, r, node, taskID)
	before := readLog(t, ctx, r, taskID)
	a := archivePass(t, ctx, r, taskID)
	if !a.InDatabase || a.Key != "" || a.Size == 0 || len(a.Sha256) != 64 {
		t.Fatalf("archive %v: want one in Postgres, with its size and sha256", a)
	}
	if n := dbCount(t, ctx, db.URL, "select count(*) from podium.task_log_archives where task_id = $1 and length(data) = $2", taskID, a.Size); n != 1 {
		t.Fatalf("%d archive rows of %d bytes, want 1", n, a.Size)
	}
	if n := eventRows(t, ctx, db.URL, taskID); n != 0 {
		t.Fatalf("%d task_events rows left, want 0", n)
	}
	sameLog(t, readLog(t, ctx, r, taskID), before)
	if err := r.Store().AppendNote(ctx, taskID, 1, "late"); err != nil {
		t.Fatal(err)
	}
	b := archivePass(t, ctx, r, taskID)
	if !b.InDatabase || b.ArchivedSeq != a.ArchivedSeq+1 {
		t.Fatalf("re-archive %v, want one in Postgres holding the note", b)
	}
	if n := dbCount(t, ctx, db.URL, "select count(*) from podium.object_deletions"); n != 0 {
		t.Fatalf("%d objects queued for deletion, want none (there is no object store)", n)
	}
	if got := readLog(t, ctx, r, taskID); len(got) != len(before)+1 || got[len(before)].GetEvent().GetNote().GetText() != "late" {
		t.Fatalf("after the re-archive the log has %d events, want %d ending with the note", len(got), len(before)+1)
	}
}

// `podium logs -f` on a task whose log is archived while it is being read:
// the follower has read part of a long log when its rows are deleted, and
// goes on from the archive with no gap and nothing twice.
func TestLogArchiveFollowAcrossTheSwitch(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Archive: noArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)
	// 1,500 events of 8 KiB: three pages of rows, and 12 MiB, more than the
	// stream's flow-control window, so the follower below, which stops
	// reading, holds the replica half way through the rows. That the final
	// message carries the archive shows the replica read the task again
	// after the rows went.
	const n, size = 1500, 8 << 10
	seq := uint64(3)
	var want bytes.Buffer
	for sent := 0; sent < n; {
		var batch []*podiumv1.TaskEvent
		for ; len(batch) < 50 && sent < n; sent++ {
			// Random bytes: the stream compresses messages, and must not
			// shrink the log below the window.
			data := string(randomBytes(uint64(sent), size))
			batch = append(batch, logEv(taskID, 1, seq, uint64(want.Len()), podiumv1.LogStream_LOG_STREAM_STDOUT, data))
			want.WriteString(data)
			seq++
		}
		node.send(t, batch...)
	}
	zero := int32(0)
	node.send(t, status(taskID, 1, seq, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	final := waitState(t, ctx, r, taskID, podiumv1.TaskState_TASK_STATE_SUCCEEDED)

	st, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: taskID, Follow: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatalf("the follower got nothing: %v", st.Err())
	}
	got := []*podiumv1.EventsResponse{st.Msg()}
	archivePass(t, ctx, r, taskID)
	if rows := eventRows(t, ctx, db.URL, taskID); rows != 0 {
		t.Fatalf("%d rows left after the archive", rows)
	}
	var last *podiumv1.Task
	for st.Receive() {
		if st.Msg().GetEvent() != nil {
			got = append(got, st.Msg())
		}
		if st.Msg().GetTask() != nil {
			last = st.Msg().GetTask()
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("following across the archive: %v", err)
	}
	var out bytes.Buffer
	for i, m := range got {
		if m.Seq != uint64(i+1) {
			t.Fatalf("event %d came at position %d: a gap or a repeat", i+1, m.Seq)
		}
		out.Write(m.GetEvent().GetLog().GetData())
	}
	if uint64(len(got)) != final.LastSeq || !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("followed %d events and %d bytes of output, want %d events and %d bytes", len(got), out.Len(), final.LastSeq, want.Len())
	}
	if last.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || last.GetLogArchive() == nil {
		t.Fatalf("the follow ended with %v, want the succeeded task with its archive", last)
	}
}

// While the object store is down the leader's job archives nothing and
// deletes nothing (the log reads from its rows), says so once, and archives
// the log once the store is back.
func TestLogArchiveWaitsForTheObjectStore(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	logs := &logBuffer{}
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3), Archive: fastArchive,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitReady(t, r)
	node, taskID := heldTask(t, ctx, r)
	s3.Stop()
	finishWithOutput(t, ctx, r, node, taskID)
	coordtest.Eventually(t, 30*time.Second, "the archive job to say it is paused", func() bool { return logs.has("log archive: paused") })
	before := readLog(t, ctx, r, taskID)
	if rows := eventRows(t, ctx, db.URL, taskID); rows != len(before) || getTask(t, ctx, r, taskID).GetLogArchive() != nil {
		t.Fatalf("with the object store down: %d rows of %d events, archive %v; want every row and no archive",
			rows, len(before), getTask(t, ctx, r, taskID).GetLogArchive())
	}
	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	coordtest.Eventually(t, 30*time.Second, "the log archived once the object store is back", func() bool {
		return getTask(t, ctx, r, taskID).GetLogArchive().GetArchivedAt() != nil
	})
	if rows := eventRows(t, ctx, db.URL, taskID); rows != 0 {
		t.Fatalf("%d rows left after the archive", rows)
	}
	sameLog(t, readLog(t, ctx, r, taskID), before)
	coordtest.Eventually(t, 10*time.Second, "the job to say it resumed", func() bool { return logs.has("log archive: resumed") })
}

// An archive object whose bytes are not the ones recorded is an error that
// says the archive is damaged and names its key: never a wrong log.
func TestLogArchiveDamagedObjectIsAnError(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3), Archive: noArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitReady(t, r)
	node, taskID := heldTask(t, ctx, r)
	finishWithOutput(t, ctx, r, node, taskID)
	a := archivePass(t, ctx, r, taskID)
	obj := objectBytes(t, ctx, s3, a.Key)
	obj[len(obj)/2] ^= 0x01
	c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, testBucket, a.Key, bytes.NewReader(obj), int64(len(obj)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, err := tryReadLog(ctx, r, taskID, false)
	if connect.CodeOf(err) != connect.CodeDataLoss || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), a.Key) {
		t.Fatalf("reading a damaged archive: %v; want data loss saying it is damaged and naming %s", err, a.Key)
	}
	if len(evs) != 0 {
		t.Fatalf("%d events of a damaged archive were sent before the error", len(evs))
	}
}

// A replica that dies between writing the archive object and recording it
// leaves the rows as the truth: the log reads whole from them, and the next
// pass writes the same key again and records it.
func TestLogArchiveCrashBeforeRecordKeepsTheRows(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3), Archive: noArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitReady(t, r)
	node, taskID := heldTask(t, ctx, r)
	finishWithOutput(t, ctx, r, node, taskID)
	before := readLog(t, ctx, r, taskID)
	died := errors.New("the replica died here")
	var written string
	j := logarchive.New(logarchive.Config{After: time.Millisecond, AfterPut: func(_, key string) error {
		written = key
		return died
	}}, logarchive.Deps{Store: r.Store(), Objects: r.Artifacts()})
	coordtest.Eventually(t, 30*time.Second, "a pass to write the archive object and die", func() bool {
		_, err := j.Pass(ctx)
		if err != nil && !errors.Is(err, died) {
			t.Fatal(err)
		}
		return errors.Is(err, died)
	})
	objects, _, err := s3.Objects(ctx, testBucket)
	if err != nil || !slices.Contains(objects, written) {
		t.Fatalf("the bucket holds %v (%v), want the object %s written before the crash", objects, err, written)
	}
	if rows := eventRows(t, ctx, db.URL, taskID); rows != len(before) || getTask(t, ctx, r, taskID).GetLogArchive() != nil {
		t.Fatalf("after the crash: %d rows of %d events, archive %v; want the rows and no archive", rows, len(before), getTask(t, ctx, r, taskID).GetLogArchive())
	}
	sameLog(t, readLog(t, ctx, r, taskID), before)
	a := archivePass(t, ctx, r, taskID)
	if a.Key != written {
		t.Fatalf("the next pass recorded %s, want the same key %s", a.Key, written)
	}
	if obj := objectBytes(t, ctx, s3, a.Key); digest(obj) != a.Sha256 {
		t.Fatalf("object %s has sha256 %s, the task records %s", a.Key, digest(obj), a.Sha256)
	}
	sameLog(t, readLog(t, ctx, r, taskID), before)
}

// Of two replicas, only the leader runs the archive job.
func TestLogArchiveOnlyTheLeaderArchives(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r1 := coordtest.Start(t, db.URL, coordtest.Options{Archive: fastArchive})
	r2 := coordtest.Start(t, db.URL, coordtest.Options{Archive: fastArchive})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coordtest.Eventually(t, 15*time.Second, "one replica to lead", func() bool { return r1.Leading() != r2.Leading() })
	node, taskID := heldTask(t, ctx, r1)
	finishWithOutput(t, ctx, r1, node, taskID)
	coordtest.Eventually(t, 30*time.Second, "the log archived", func() bool {
		return getTask(t, ctx, r1, taskID).GetLogArchive().GetArchivedAt() != nil
	})
	leader, standby := r1, r2
	if r2.Leading() {
		leader, standby = r2, r1
	}
	if m := scrape(t, leader); !strings.Contains(m, "podium_log_archives_total 1\n") {
		t.Errorf("the leader's metrics do not count one archive:\n%s", grepLines(m, "podium_log_archive"))
	}
	if m := scrape(t, standby); !strings.Contains(m, "podium_log_archives_total 0\n") {
		t.Errorf("the standby's metrics count archives:\n%s", grepLines(m, "podium_log_archive"))
	}
	if m := scrape(t, standby); !strings.Contains(m, "podium_log_archive_backlog 0\n") {
		t.Errorf("the backlog is not empty after the archive:\n%s", grepLines(m, "podium_log_archive"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
