package integration_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

const testBucket = "podium-artifacts"

// s3Config points a replica at a test S3 server, with the smallest part size
// S3 allows so that a few MiB already make a multipart upload of many parts.
func s3Config(s *s3test.Server) artifacts.Config {
	return artifacts.Config{
		Endpoint: s.Endpoint, Bucket: testBucket, AccessKey: s.AccessKey, SecretKey: s.SecretKey,
		PartSize: 5 << 20,
	}
}

// heldTask connects a simulated node, hands it a task and has it report the
// task running: the node then holds attempt 1 of the returned task.
func heldTask(t *testing.T, ctx context.Context, r *coordtest.Replica) (*simNode, string) {
	t.Helper()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	taskID := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	a := assignOf(t, node)
	if a.TaskId != taskID || a.Attempt != 1 {
		t.Fatalf("assigned %s attempt %d, want %s attempt 1", a.TaskId, a.Attempt, taskID)
	}
	node.send(t, status(taskID, 1, 1, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil),
		status(taskID, 1, 2, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, taskID, podiumv1.TaskState_TASK_STATE_RUNNING)
	return node, taskID
}

func meta(n *simNode, taskID, name string) *podiumv1.ArtifactMeta {
	return &podiumv1.ArtifactMeta{NodeId: n.id, NodeKey: n.key, TaskId: taskID, Attempt: 1, Name: name}
}

// upload speaks the upload protocol as an agent does: the meta, then the body
// in 256 KiB chunks.
func upload(ctx context.Context, r *coordtest.Replica, m *podiumv1.ArtifactMeta, body io.Reader) (*podiumv1.UploadArtifactResponse, error) {
	st := r.NodeClient().UploadArtifact(ctx)
	if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Meta{Meta: m}}); err == nil {
		buf := make([]byte, 256<<10)
		for {
			n, rerr := io.ReadFull(body, buf)
			if n > 0 {
				// A send fails once the coordinator has answered early (a
				// refusal); CloseAndReceive then says why.
				if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Chunk{Chunk: buf[:n]}}); err != nil {
					break
				}
			}
			if rerr != nil {
				break
			}
		}
	}
	res, err := st.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

func download(t *testing.T, ctx context.Context, r *coordtest.Replica, taskID, name string) (*podiumv1.Artifact, []byte) {
	t.Helper()
	st, err := r.Tasks().DownloadArtifact(ctx, connect.NewRequest(&podiumv1.DownloadArtifactRequest{Id: taskID, Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var a *podiumv1.Artifact
	var body bytes.Buffer
	for st.Receive() {
		switch m := st.Msg().GetMsg().(type) {
		case *podiumv1.DownloadArtifactResponse_Artifact:
			if a != nil || body.Len() > 0 {
				t.Fatalf("download of %s: the artifact came again in the middle", name)
			}
			a = m.Artifact
		case *podiumv1.DownloadArtifactResponse_Chunk:
			body.Write(m.Chunk)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("download of %s: %v", name, err)
	}
	if a == nil {
		t.Fatalf("download of %s: no artifact message came first", name)
	}
	return a, body.Bytes()
}

func listArtifacts(t *testing.T, ctx context.Context, r *coordtest.Replica, taskID string) []*podiumv1.Artifact {
	t.Helper()
	res, err := r.Tasks().ListArtifacts(ctx, connect.NewRequest(&podiumv1.ListArtifactsRequest{Id: taskID}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Artifacts
}

// artifactRows counts every artifact row in the database, of any task, on a
// connection of the test's own: the store offers no such count, and a row
// stored under the wrong task would escape a count of one task's.
func artifactRows(t *testing.T, ctx context.Context, db pgtest.Database) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from podium.artifacts").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// bucketHas asserts the bucket holds exactly n complete objects and no
// multipart upload left open.
func bucketHas(t *testing.T, ctx context.Context, s *s3test.Server, n int) {
	t.Helper()
	objects, incomplete, err := s.Objects(ctx, testBucket)
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) != n || len(incomplete) != 0 {
		t.Fatalf("the bucket holds objects %v and open uploads %v, want %d objects and no open upload", objects, incomplete, n)
	}
}

func readyz(t *testing.T, r *coordtest.Replica) (int, string) {
	t.Helper()
	res, err := http.Get(r.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func waitReady(t *testing.T, r *coordtest.Replica) {
	t.Helper()
	coordtest.Eventually(t, 15*time.Second, "/readyz to answer 200", func() bool {
		code, _ := readyz(t, r)
		return code == http.StatusOK
	})
}

func refusal(t *testing.T, err error, code connect.Code, says string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got %v, want %v", err, code)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Message(), says) {
		t.Fatalf("refusal %q does not say %q", err, says)
	}
}

// Three files — one empty, one small, one of many parts — go up through the
// coordinator, the last two after the task has ended; each is listed with its
// size and digest, comes back byte for byte through DownloadArtifact and
// through a presigned URL, and is noted in the task's log.
func TestArtifactsUploadListDownload(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	waitReady(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)

	files := map[string][]byte{
		"out/report.xml": []byte("<testsuite tests=\"1\"/>\n"),
		"empty.txt":      {},
		"big.bin":        randomBytes(1, 23<<20+12345), // five parts and a bit
	}
	res, err := upload(ctx, r, meta(node, taskID, "out/report.xml"), bytes.NewReader(files["out/report.xml"]))
	if err != nil {
		t.Fatalf("upload while running: %v", err)
	}
	if !strings.HasPrefix(res.ArtifactId, "art_") || res.Size != int64(len(files["out/report.xml"])) || res.Sha256 != digest(files["out/report.xml"]) || res.Replaced {
		t.Fatalf("upload answered %v", res)
	}
	// The agent collects the rest after the container exited, so after the
	// final status: they are still taken.
	zero := int32(0)
	node.send(t, status(taskID, 1, 3, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	waitState(t, ctx, r, taskID, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	for _, name := range []string{"empty.txt", "big.bin"} {
		res, err := upload(ctx, r, meta(node, taskID, name), bytes.NewReader(files[name]))
		if err != nil {
			t.Fatalf("upload of %s after the task ended: %v", name, err)
		}
		if res.Size != int64(len(files[name])) || res.Sha256 != digest(files[name]) {
			t.Fatalf("upload of %s answered size %d sha256 %s, want %d %s", name, res.Size, res.Sha256, len(files[name]), digest(files[name]))
		}
	}

	list := listArtifacts(t, ctx, r, taskID)
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
		want := files[a.Name]
		if a.Size != int64(len(want)) || a.Sha256 != digest(want) || a.Attempt != 1 || a.NodeId != node.id || a.TaskId != taskID || a.CreatedAt == nil {
			t.Errorf("listed %v, want size %d sha256 %s", a, len(want), digest(want))
		}
	}
	if !slices.Equal(names, []string{"big.bin", "empty.txt", "out/report.xml"}) {
		t.Fatalf("listed %v, want the three files by name", names)
	}

	for name, want := range files {
		a, got := download(t, ctx, r, taskID, name)
		if !bytes.Equal(got, want) {
			t.Fatalf("downloaded %s: %d bytes (sha256 %s), want %d (%s)", name, len(got), digest(got), len(want), digest(want))
		}
		if a.Name != name || a.Size != int64(len(want)) || a.Sha256 != digest(want) {
			t.Fatalf("download of %s announced %v", name, a)
		}
	}

	u, err := r.Tasks().ArtifactURL(ctx, connect.NewRequest(&podiumv1.ArtifactURLRequest{Id: taskID, Name: "out/report.xml"}))
	if err != nil {
		t.Fatal(err)
	}
	if u.Msg.ValidSeconds != 900 || time.Until(u.Msg.ExpiresAt.AsTime()) < 14*time.Minute || time.Until(u.Msg.ExpiresAt.AsTime()) > 15*time.Minute {
		t.Fatalf("URL valid %d s until %v, want 15 minutes from now", u.Msg.ValidSeconds, u.Msg.ExpiresAt.AsTime())
	}
	got, err := http.Get(u.Msg.Url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if got.StatusCode != http.StatusOK || !bytes.Equal(body, files["out/report.xml"]) {
		t.Fatalf("GET of the presigned URL: %s %q", got.Status, body)
	}
	if cd := got.Header.Get("Content-Disposition"); !strings.Contains(cd, "report.xml") {
		t.Errorf("Content-Disposition %q does not offer the file's name", cd)
	}

	if !logHas(t, ctx, r, taskID, fmt.Sprintf("artifact big.bin (%d bytes, sha256 %s) stored", len(files["big.bin"]), digest(files["big.bin"]))) {
		t.Error("the task's log has no note of big.bin")
	}
	bucketHas(t, ctx, s3, 3)
	// Anything that names no artifact is NotFound, and says how to see them.
	_, err = r.Tasks().ArtifactURL(ctx, connect.NewRequest(&podiumv1.ArtifactURLRequest{Id: taskID, Name: "nope"}))
	refusal(t, err, connect.CodeNotFound, "podium artifacts "+taskID)
}

// A second upload of a name replaces the first: one row, the new bytes, the
// old object gone.
func TestArtifactUploadTwiceReplaces(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)
	first, err := upload(ctx, r, meta(node, taskID, "result.json"), strings.NewReader(`{"try":1}`))
	if err != nil {
		t.Fatal(err)
	}
	second, err := upload(ctx, r, meta(node, taskID, "result.json"), strings.NewReader(`{"try":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Replaced || second.ArtifactId == first.ArtifactId {
		t.Fatalf("second upload answered %v, want a new artifact that replaced the first", second)
	}
	list := listArtifacts(t, ctx, r, taskID)
	if len(list) != 1 || list[0].Id != second.ArtifactId {
		t.Fatalf("listed %v, want only the second upload", list)
	}
	if _, got := download(t, ctx, r, taskID, "result.json"); string(got) != `{"try":2}` {
		t.Fatalf("downloaded %q, want the second upload's bytes", got)
	}
	bucketHas(t, ctx, s3, 1)
	if !logHas(t, ctx, r, taskID, "replacing an earlier upload") {
		t.Error("the task's log does not say the artifact was replaced")
	}
}

// stopAfter reads n random bytes and calls at once after the first cut of
// them.
type stopAfter struct {
	src      io.Reader
	left     int
	cut      int
	at       func()
	stopped  bool
	consumed int
}

func (s *stopAfter) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if len(p) > s.left {
		p = p[:s.left]
	}
	if !s.stopped && s.consumed >= s.cut {
		s.stopped = true
		s.at()
	}
	n, err := s.src.Read(p)
	s.left -= n
	s.consumed += n
	return n, err
}

// The object store dies in the middle of an upload: the node is told to
// retry, nothing is recorded, /readyz says why. Once the store is back the
// retry succeeds and exactly one artifact exists.
func TestArtifactStoreOutageDuringUpload(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	waitReady(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)

	body := &stopAfter{src: rand.NewChaCha8([32]byte{7}), left: 64 << 20, cut: 12 << 20, at: s3.Stop}
	_, err := upload(ctx, r, meta(node, taskID, "big.bin"), body)
	refusal(t, err, connect.CodeUnavailable, "nothing was stored, retry later")
	if !body.stopped {
		t.Fatal("the upload ended before the object store was stopped")
	}
	if n := artifactRows(t, ctx, db); n != 0 {
		t.Fatalf("%d artifact rows after a failed upload, want none", n)
	}
	coordtest.Eventually(t, 15*time.Second, "/readyz to say the object store is down", func() bool {
		code, text := readyz(t, r)
		return code == http.StatusServiceUnavailable && strings.Contains(text, "object store") && strings.Contains(text, s3.Endpoint)
	})
	// While it is down, an upload is refused before any byte is taken.
	_, err = upload(ctx, r, meta(node, taskID, "big.bin"), strings.NewReader("x"))
	refusal(t, err, connect.CodeUnavailable, "does not answer")

	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	want := randomBytes(8, 11<<20)
	res, err := upload(ctx, r, meta(node, taskID, "big.bin"), bytes.NewReader(want))
	if err != nil {
		t.Fatalf("retry after the object store came back: %v", err)
	}
	if res.Sha256 != digest(want) || res.Replaced {
		t.Fatalf("retry answered %v", res)
	}
	if n := artifactRows(t, ctx, db); n != 1 {
		t.Fatalf("%d artifact rows after the retry, want exactly one", n)
	}
	if _, got := download(t, ctx, r, taskID, "big.bin"); !bytes.Equal(got, want) {
		t.Fatal("the retried artifact does not read back as uploaded")
	}
	waitReady(t, r)
}

// A coordinator whose object store is down when it starts still starts, says
// why it is not ready, refuses uploads as retryable, and recovers (creating the
// bucket) once the store answers.
func TestArtifactStoreDownAtStart(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	s3.Stop()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	coordtest.Eventually(t, 10*time.Second, "/readyz to say the object store is down", func() bool {
		code, text := readyz(t, r)
		return code == http.StatusServiceUnavailable && strings.Contains(text, "object store") && !strings.Contains(text, "connection refused")
	})
	node, taskID := heldTask(t, ctx, r) // everything but artifacts works
	_, err := upload(ctx, r, meta(node, taskID, "a.txt"), strings.NewReader("a"))
	refusal(t, err, connect.CodeUnavailable, "the artifact store is unavailable")
	// A refusal that no retry can change is given as such even now, so the
	// node does not retry it for ever.
	wrong := meta(node, taskID, "a.txt")
	wrong.Attempt = 7
	_, err = upload(ctx, r, wrong, strings.NewReader("a"))
	refusal(t, err, connect.CodePermissionDenied, "does not hold")

	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r)
	if _, err := upload(ctx, r, meta(node, taskID, "a.txt"), strings.NewReader("a")); err != nil {
		t.Fatal(err)
	}
	bucketHas(t, ctx, s3, 1)
}

// Every refusal says what was wrong and leaves nothing behind: no row, no
// object, no multipart upload left open.
func TestArtifactUploadRefusals(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	cfg := s3Config(s3)
	cfg.MaxSize = 6 << 20 // more than one part, so an abort has parts to remove
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: cfg})
	waitReady(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)

	for _, tc := range []struct{ name, says string }{
		{"../../etc/passwd", `".." segment`},
		{"out/../../x", `".." segment`},
		{"/etc/passwd", "absolute path"},
		{"out//x", "empty path segment"},
		{"out/", "empty path segment"},
		{"", "empty"},
		{"bell\a", "control character"},
		{`..\x`, "backslash"},
		{strings.Repeat("n", 300), "more than 255"},
	} {
		_, err := upload(ctx, r, meta(node, taskID, tc.name), strings.NewReader("data"))
		refusal(t, err, connect.CodeInvalidArgument, tc.says)
	}

	_, err := upload(ctx, r, meta(node, taskID, "huge.bin"), bytes.NewReader(randomBytes(2, 20<<20)))
	refusal(t, err, connect.CodeResourceExhausted, "more than the 6291456 bytes (6.0 MiB) this coordinator accepts")

	bad := meta(node, taskID, "a.txt")
	bad.NodeKey = "podium_nk_wrong"
	_, err = upload(ctx, r, bad, strings.NewReader("data"))
	refusal(t, err, connect.CodeUnauthenticated, "node key")

	other, otherKey := enroll(t, r)
	_, err = upload(ctx, r, &podiumv1.ArtifactMeta{NodeId: other, NodeKey: otherKey, TaskId: taskID, Attempt: 1, Name: "a.txt"}, strings.NewReader("data"))
	refusal(t, err, connect.CodePermissionDenied, "does not hold task "+taskID+" attempt 1")
	wrongAttempt := meta(node, taskID, "a.txt")
	wrongAttempt.Attempt = 2
	_, err = upload(ctx, r, wrongAttempt, strings.NewReader("data"))
	refusal(t, err, connect.CodePermissionDenied, "does not hold")

	st := r.NodeClient().UploadArtifact(ctx)
	_ = st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Chunk{Chunk: []byte("no meta")}})
	_, err = st.CloseAndReceive()
	refusal(t, err, connect.CodeInvalidArgument, "first message")

	// An attempt that ended longer ago than the grace takes nothing more.
	zero := int32(0)
	node.send(t, status(taskID, 1, 3, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	waitState(t, ctx, r, taskID, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `update podium.attempts set finished_at = now() - interval '11 minutes' where task_id = $1`, taskID); err != nil {
		t.Fatal(err)
	}
	_, err = upload(ctx, r, meta(node, taskID, "late.txt"), strings.NewReader("data"))
	refusal(t, err, connect.CodeFailedPrecondition, "artifacts are taken for 10m0s after an attempt ends")

	if n := artifactRows(t, ctx, db); n != 0 {
		t.Fatalf("%d artifact rows after refused uploads, want none", n)
	}
	bucketHas(t, ctx, s3, 0)
}

// The size cap is inclusive: an artifact of exactly the cap is stored.
func TestArtifactAtTheCapIsStored(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	cfg := s3Config(s3)
	cfg.MaxSize = 1 << 20
	r := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)
	want := randomBytes(3, 1<<20)
	res, err := upload(ctx, r, meta(node, taskID, "exact.bin"), bytes.NewReader(want))
	if err != nil || res.Size != 1<<20 {
		t.Fatalf("upload of exactly the cap: %v, %v", res, err)
	}
	_, err = upload(ctx, r, meta(node, taskID, "over.bin"), bytes.NewReader(append(want, 0)))
	refusal(t, err, connect.CodeResourceExhausted, "over.bin")
	bucketHas(t, ctx, s3, 1)
}

// Any replica takes an upload: the node's stream is on B, the upload goes to
// A, and both list it.
func TestArtifactUploadToAnotherReplica(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabase(t)
	a := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	b := coordtest.Start(t, db.URL, coordtest.Options{Artifacts: s3Config(s3)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, taskID := heldTask(t, ctx, b)
	want := randomBytes(4, 6<<20)
	res, err := upload(ctx, a, meta(node, taskID, "logs/full.log"), bytes.NewReader(want))
	if err != nil {
		t.Fatalf("upload to the replica not holding the node's stream: %v", err)
	}
	for _, r := range []*coordtest.Replica{a, b} {
		list := listArtifacts(t, ctx, r, taskID)
		if len(list) != 1 || list[0].Id != res.ArtifactId || list[0].Sha256 != digest(want) {
			t.Fatalf("replica %s lists %v", r.ReplicaID(), list)
		}
	}
	if _, got := download(t, ctx, b, taskID, "logs/full.log"); !bytes.Equal(got, want) {
		t.Fatal("download through B differs from what went up through A")
	}
}

// A coordinator with no object store says so to a node that uploads and to a
// person who downloads, lists nothing, and is ready: no store is a choice.
func TestArtifactsNotConfigured(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, taskID := heldTask(t, ctx, r)
	_, err := upload(ctx, r, meta(node, taskID, "a.txt"), strings.NewReader("a"))
	refusal(t, err, connect.CodeFailedPrecondition, "artifacts are not configured")
	coordtest.Eventually(t, 15*time.Second, "/readyz to answer ready with no object store", func() bool {
		code, _ := readyz(t, r)
		return code == http.StatusOK
	})
	if list := listArtifacts(t, ctx, r, taskID); len(list) != 0 {
		t.Fatalf("listed %v", list)
	}
	_, err = r.Tasks().ArtifactURL(ctx, connect.NewRequest(&podiumv1.ArtifactURLRequest{Id: taskID, Name: "a.txt"}))
	refusal(t, err, connect.CodeFailedPrecondition, "PODIUM_S3_ENDPOINT")
	st, err := r.Tasks().DownloadArtifact(ctx, connect.NewRequest(&podiumv1.DownloadArtifactRequest{Id: taskID, Name: "a.txt"}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	refusal(t, err, connect.CodeFailedPrecondition, "artifacts are not configured")
}
