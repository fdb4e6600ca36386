package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/retention"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/s3test"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// What retention removed, read through a real coordinator and the CLI: a
// task submitted with `podium run --retain 1h` that ended two hours ago is
// gone, and task get, logs and the API say it expired by retention on which
// date (NotFound, not "no task"); a task whose log is past --retain-logs
// keeps its row, and logs says the log expired; a task whose artifacts are
// past --retain-artifacts says so on artifacts and artifact get, and the
// objects leave the object store.
func TestRetentionThroughTheCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	s3 := s3test.Start(t)
	const bucket = "podium-artifacts"
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Retention: retention.Config{Logs: 24 * time.Hour, Every: 50 * time.Millisecond},
		Artifacts: artifacts.Config{Endpoint: s3.Endpoint, Bucket: bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	submit := func(args ...string) string {
		code, out, errOut := podium(append([]string{"run", "--detach", "--image", "busybox"}, args...)...)
		if code != 0 {
			t.Fatalf("podium run: exit %d: %s", code, errOut)
		}
		return strings.TrimSpace(out)
	}
	short, logged, withArtifact := submit("--retain", "1h"), submit(), submit()
	if code, out, _ := podium("task", "get", short); code != 0 || !strings.Contains(out, "retain:") || !strings.Contains(out, "1h") {
		t.Errorf("task get of a task with --retain 1h: exit %d:\n%s", code, out)
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The object must exist before its row names it, as uploads do.
	s3c, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the coordinator to create its bucket", func() bool {
		ok, err := s3c.BucketExists(ctx, bucket)
		return err == nil && ok
	})
	if _, err := s3c.PutObject(ctx, bucket, "artifacts/old", strings.NewReader("data"), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// Backdate: the three ended in the past, their ages past what applies.
	exec(`update podium.tasks set state = 'succeeded', finished_at = now() - interval '2 hours' where id = $1`, short)
	exec(`insert into podium.task_events (task_id, seq, kind, data) values ($1, 1, 'stdout', 'hello')`, logged)
	exec(`update podium.tasks set state = 'succeeded', last_seq = 1, finished_at = now() - interval '2 days' where id = $1`, logged)
	exec(`update podium.tasks set state = 'succeeded', finished_at = now() - interval '31 days' where id = $1`, withArtifact)
	exec(`insert into podium.artifacts (id, task_id, attempt, node_id, name, size, sha256, object_key, created_at)
		values ('artifact_old', $1, 1, 'node_x', 'out.txt', 4, repeat('0', 64), 'artifacts/old', now() - interval '31 days')`, withArtifact)
	today := time.Now().UTC().Format("2006-01-02")

	wait.For(t, 30*time.Second, "the task with retain 1h to expire", func() bool {
		code, _, errOut := podium("task", "get", short)
		return code == exitUsage && strings.Contains(errOut, short+" expired by retention on "+today)
	})
	if code, _, errOut := podium("logs", short); code != exitUsage || !strings.Contains(errOut, "expired by retention on "+today) {
		t.Errorf("logs of the expired task: exit %d: %s", code, errOut)
	}
	_, err = r.Tasks().Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: short}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "expired by retention on "+today) {
		t.Errorf("Get of the expired task: %v; want NotFound saying it expired", err)
	}
	stream, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: short}))
	if err == nil {
		for stream.Receive() {
			t.Error("Events of the expired task sent a message")
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "expired by retention") {
		t.Errorf("Events of the expired task: %v; want NotFound saying it expired", err)
	}
	// A task that never was is still "no task".
	if code, _, errOut := podium("task", "get", "task_01JAAAAAAAAAAAAAAAAAAAAAAA"); code != exitUsage || strings.Contains(errOut, "expired") {
		t.Errorf("task get of an unknown task: exit %d: %s", code, errOut)
	}

	wait.For(t, 30*time.Second, "the log to expire", func() bool {
		code, out, _ := podium("task", "get", logged)
		return code == 0 && strings.Contains(out, "expired by retention on "+today)
	})
	code, out, errOut := podium("logs", logged)
	if code != exitPodium || out != "" || !strings.Contains(errOut, "the log of "+logged+" expired by retention on "+today) {
		t.Errorf("logs of a task whose log expired: exit %d, stdout %q: %s", code, out, errOut)
	}

	wait.For(t, 30*time.Second, "the artifacts to expire", func() bool {
		code, _, errOut := podium("artifacts", withArtifact)
		return code == 0 && strings.Contains(errOut, "the artifacts of task "+withArtifact+" expired by retention on "+today)
	})
	if code, _, errOut := podium("artifact", "get", "-o", "-", withArtifact, "out.txt"); code != exitUsage ||
		!strings.Contains(errOut, "the artifacts of "+withArtifact+" expired by retention on "+today) {
		t.Errorf("artifact get of an expired artifact: exit %d: %s", code, errOut)
	}
	// The sweeper removed the object and emptied the queue.
	wait.For(t, 30*time.Second, "the object to leave the store and the queue", func() bool {
		_, err := s3c.StatObject(ctx, bucket, "artifacts/old", minio.StatObjectOptions{})
		var n int
		qerr := conn.QueryRow(ctx, "select count(*) from podium.object_deletions").Scan(&n)
		return minio.ToErrorResponse(err).Code == "NoSuchKey" && qerr == nil && n == 0
	})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
}
