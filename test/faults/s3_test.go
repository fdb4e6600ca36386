package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// s3Bucket is the bucket the rows below give the coordinator.
const s3Bucket = "podium-artifacts"

// s3Flags are the serve flags that store artifacts (and log archives) in s3.
func s3Flags(s3 *s3test.Server) []string {
	return []string{"--s3-endpoint", s3.Endpoint, "--s3-tls=false", "--s3-bucket", s3Bucket,
		"--s3-access-key", s3.AccessKey, "--s3-secret-key", s3.SecretKey}
}

// stopS3MidMultipart stops s3 as soon as a part of a multipart upload is on
// its disk (versitygw's posix backend keeps open uploads under
// BUCKET/.sgwtmp/multipart): the upload has begun and is not complete.
// It fails the test if none appears within within.
func stopS3MidMultipart(t *testing.T, s3 *s3test.Server, within time.Duration, what string) {
	t.Helper()
	dir := filepath.Join(s3.Dir, s3Bucket, ".sgwtmp", "multipart")
	deadline := time.Now().Add(within)
	for {
		found := false
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				found = true
				return filepath.SkipAll
			}
			return nil
		})
		if found {
			s3.Stop()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no part of a multipart upload appeared under %s within %s: %s never reached the object store", dir, within, what)
		}
		time.Sleep(5 * time.Millisecond) // a tight poll: the window is a few seconds
	}
}

// bucketUnder is the object keys under prefix and the keys with a multipart
// upload still open, as the object store lists them.
func bucketUnder(t *testing.T, s3 *s3test.Server, prefix string) (objects, open []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, incomplete, err := s3.Objects(ctx, s3Bucket)
	if err != nil {
		t.Fatalf("list bucket %s: %v", s3Bucket, err)
	}
	for _, k := range all {
		if strings.HasPrefix(k, prefix) {
			objects = append(objects, k)
		}
	}
	for _, k := range incomplete {
		if strings.HasPrefix(k, prefix) {
			open = append(open, k)
		}
	}
	return objects, open
}

// bucketLogger logs what the bucket holds under prefix when it differs
// from what it logged last, so that a wait that gives up shows what it saw.
func bucketLogger(t *testing.T) func(prefix string, objects, open []string) {
	last := ""
	return func(prefix string, objects, open []string) {
		t.Helper()
		now := fmt.Sprintf("the bucket holds %v under %s, with open multipart uploads %v", objects, prefix, open)
		if now != last {
			last = now
			t.Log(now)
		}
	}
}

var artifactSumRe = regexp.MustCompile(`(?m)^([0-9a-f]{64})  big\.bin$`)

// TestObjectStoreDownMidArtifactUpload: a task writes a 200 MB artifact;
// while the coordinator streams it into the object store (a part of its
// multipart upload is on the store's disk), the store is killed. The task
// still succeeds with a note that the upload failed and will be retried;
// once the store is back, the agent's retry stores the artifact: listed
// once, with the task's own SHA-256, downloaded byte-exact. The bucket then
// holds exactly one object for the task and no multipart upload left open:
// the one the outage cut off is aborted once the store answers again.
func TestObjectStoreDownMidArtifactUpload(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL, s3Flags(s3)...)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	const size = 200 << 20
	run := StartRun(t, []string{r.URL()}, "--image", dockertest.EnsureImage(t), "--", "sh", "-c",
		`cd /workspace/.podium/artifacts && head -c 209715200 /dev/urandom > big.bin && sha256sum big.bin`)
	id := run.TaskID(t)
	stopS3MidMultipart(t, s3, runWithin, "the artifact's upload")
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d, want 0: a failed upload does not fail the task; stderr:\n%s", code, run.Stderr())
	}
	m := artifactSumRe.FindSubmatch(run.Stdout())
	if m == nil {
		t.Fatalf("the task did not print the sha256 of big.bin; stdout:\n%s", run.Stdout())
	}
	want := string(m[1])
	if !strings.Contains(run.Stderr(), "→ artifact big.bin: upload failed: ") {
		t.Fatalf("podium run does not show the upload that the outage cut off; stderr:\n%s", run.Stderr())
	}

	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	var list []*podiumv1.Artifact
	wait.For(t, runWithin, "the agent's retry to store big.bin once the object store is back", func() bool {
		res, err := r.Tasks().ListArtifacts(context.Background(), connect.NewRequest(&podiumv1.ListArtifactsRequest{Id: id}))
		if err != nil {
			return false
		}
		list = res.Msg.Artifacts
		return len(list) > 0
	})
	if len(list) != 1 || list[0].GetName() != "big.bin" || list[0].GetSize() != size || list[0].GetSha256() != want {
		t.Fatalf("listed %v; want big.bin alone, %d bytes with the task's sha256 %s", list, size, want)
	}
	dest := filepath.Join(t.TempDir(), "big.bin")
	if get := StartPodium(t, []string{r.URL()}, "artifact", "get", id, "big.bin", "-o", dest); get.Wait(t) != 0 {
		t.Fatalf("podium artifact get: %s", get.Stderr())
	}
	b, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); len(b) != size || hex.EncodeToString(sum[:]) != want {
		t.Fatalf("downloaded %d bytes with sha256 %x; the task wrote %d with %s", len(b), sum, size, want)
	}
	prefix := "tasks/" + id + "/"
	var objects, open []string
	logBucket := bucketLogger(t)
	wait.For(t, nodeWithin, "one object for the task and no multipart upload left open in the bucket", func() bool {
		objects, open = bucketUnder(t, s3, prefix)
		logBucket(prefix, objects, open)
		return len(objects) == 1 && len(open) == 0
	})
	NothingLeft(t, a.Node)
}

// archiveKeyRe is a task's log archive object (artifacts.LogArchiveKey).
var archiveKeyRe = regexp.MustCompile(`^tasks/task_[0-9A-Z]{26}/log-[0-9]+\.zst$`)

// TestObjectStoreDownMidLogArchive: a finished task's log (about 24 MB of
// incompressible text, so that its archive is a multipart upload) is moved
// from Postgres to the object store by the log archive job; the store is
// killed while the archive is being written, and the job says it is paused.
// Once it is back the job archives the log: the bucket holds exactly one archive object for the
// task and no multipart upload left open, and `podium logs` prints the
// task's output byte-exact (its own checksum), as `podium run` printed it.
func TestObjectStoreDownMidLogArchive(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	db := pgtest.NewDatabaseIn(t, pgtest.NewCluster(t))
	r := StartReplica(t, db.URL, append(s3Flags(s3), "--archive-after", "1s")...)
	a := EnrollAgent(t, r, r.URL())
	a.Start()
	r.WaitNode(t, a.Node, podiumv1.NodeStatus_NODE_STATUS_ONLINE)

	// base64 of random bytes: zstd cannot shrink it below 3 parts of 8 MiB.
	run := StartRun(t, []string{r.URL()}, "--image", dockertest.EnsureImage(t), "--", "sh", "-c",
		`mkdir -p /tmp && head -c 18000000 /dev/urandom | base64 > /tmp/out && cat /tmp/out && echo "sha256 $(sha256sum < /tmp/out | cut -c1-64)"`)
	id := run.TaskID(t)
	stopS3MidMultipart(t, s3, runWithin, "the task's log archive")
	if code := run.Wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, run.Stderr())
	}
	printed := run.Stdout()
	body, sum, ok := splitChecksum(printed)
	if !ok {
		t.Fatalf("podium run's stdout (%d bytes) does not end with the task's checksum line", len(printed))
	}
	if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
		t.Fatalf("podium run printed %d bytes with sha256 %x; the task printed %s", len(body), got, sum)
	}

	// The job met the outage: its put failed and it backs off.
	wait.For(t, nodeWithin, "the replica to log that the log archive is paused", func() bool {
		return strings.Contains(r.Log(), "log archive: paused")
	})
	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	prefix := "tasks/" + id + "/"
	var objects, open []string
	logBucket := bucketLogger(t)
	wait.For(t, runWithin, "the log archive job to write the task's archive once the object store is back, leaving no multipart upload open", func() bool {
		objects, open = bucketUnder(t, s3, prefix)
		logBucket(prefix, objects, open)
		return len(objects) == 1 && archiveKeyRe.MatchString(objects[0]) && len(open) == 0
	})
	// Archived means the task names the object and its event rows are
	// gone: podium logs then reads the archive, and it must be the same bytes.
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	wait.For(t, nodeWithin, "the task to name its archive object and its log rows to be deleted", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var key *string
		var rows int
		err := conn.QueryRow(ctx, `select log_archive_key, (select count(*) from podium.task_events e
			where e.task_id = t.id and e.seq <= t.log_archived_seq and e.kind = 'stdout') from podium.tasks t where id = $1`, id).Scan(&key, &rows)
		return err == nil && key != nil && *key == objects[0] && rows == 0
	})
	logs := StartPodium(t, []string{r.URL()}, "logs", "--quiet", id)
	if code := logs.Wait(t); code != 0 {
		t.Fatalf("podium logs exited %d: %s", code, logs.Stderr())
	}
	if got := logs.Stdout(); !bytes.Equal(got, printed) {
		t.Fatalf("podium logs printed %d bytes from the archive; podium run printed %d (the task's own checksum %s)", len(got), len(printed), sum)
	}
	NothingLeft(t, a.Node)
}
