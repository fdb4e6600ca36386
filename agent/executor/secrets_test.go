package executor_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/redact"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// secretValue has bytes whose base64 holds '+' and '/' (so base64url
// differs) and that query escaping changes.
const secretValue = "pa55?w0rd>>>~~~/ok"

// streamText is a stream's chunks put together in the order they were sent.
// The offsets are not checked: a redacted chunk is not as long as what it
// stands for.
func streamText(r *recorder, stream podiumv1.LogStream) string {
	var b strings.Builder
	for _, ev := range r.all() {
		if c := ev.GetLog(); c != nil && c.GetStream() == stream {
			b.Write(c.GetData())
		}
	}
	return b.String()
}

// noSecretIn fails the test if any form of the secret the redactor looks
// for is in text.
func noSecretIn(t *testing.T, where, text string) {
	t.Helper()
	for _, f := range redact.Forms([]byte(secretValue)) {
		if len(f) >= redact.MinLen && strings.Contains(text, f) {
			t.Fatalf("%s holds the secret as %q: %q", where, f, text)
		}
	}
}

// split prints s in two writes with a pause between, so that the halves
// reach the runner log as two records and the agent as two reads.
func split(label, s string, at int) string {
	return fmt.Sprintf("printf '%%s' '%s%s'; sleep 0.2; printf '%%s\\n' '%s'; ", label, s[:at], s[at:])
}

// TestSecretIsRedactedInEveryEncodingSplitAcrossWrites: a task that has its
// secret in its environment prints it raw, as `printf %s "$S" | base64`
// prints it, unpadded, base64url, query-escaped and in hex of both cases,
// each split across two writes with a pause between, on stdout and stderr:
// the events hold [redacted:db-password] in each place and the value in no
// form, and so does the executor's log.
func TestSecretIsRedactedInEveryEncodingSplitAcrossWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b64 := base64.StdEncoding.EncodeToString([]byte(secretValue))
	script := `printf 'raw=%s' "${S:0:7}"; sleep 0.2; printf '%s\n' "${S:7}"; ` +
		`printf 'b64=%s' "$(printf %s "$S" | base64 | cut -c1-5)"; sleep 0.2; printf '%s\n' "$(printf %s "$S" | base64 | cut -c6-)"; ` +
		split("nopad=", strings.TrimRight(b64, "="), 9) +
		split("url=", base64.URLEncoding.EncodeToString([]byte(secretValue)), 11) +
		split("query=", url.QueryEscape(secretValue), 4) +
		`printf 'hex=%s' "$(printf %s "$S" | xxd -p | cut -c1-13)"; sleep 0.2; printf '%s\n' "$(printf %s "$S" | xxd -p | cut -c14-)"; ` +
		split("HEX=", strings.ToUpper(hex.EncodeToString([]byte(secretValue))), 20) +
		`printf '%s' "${S:0:3}" >&2; sleep 0.2; printf '%s\n' "${S:3}" >&2`
	a := e.assign(t, e.sh(script))
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue), Env: "S"}}
	rec := newRecorder()
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	const r = "[redacted:db-password]"
	want := "raw=" + r + "\nb64=" + r + "\nnopad=" + r + "\nurl=" + r + "\nquery=" + r + "\nhex=" + r + "\nHEX=" + r + "\n"
	if got := streamText(rec, podiumv1.LogStream_LOG_STREAM_STDOUT); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	if got := streamText(rec, podiumv1.LogStream_LOG_STREAM_STDERR); got != r+"\n" {
		t.Fatalf("stderr %q, want %q", got, r+"\n")
	}
	for _, ev := range rec.all() {
		noSecretIn(t, "an event", ev.String())
	}
	noSecretIn(t, "the executor's log", e.logs.String())
}

// TestSecretRedactedInSidecarLines: a sidecar's lines, which become notes,
// are redacted too, also where the sidecar wrote the secret in two pieces.
func TestSecretRedactedInSidecarLines(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("until [ -n \"$(ls /run/podium/inbox/*.msg 2>/dev/null)\" ]; do sleep 0.05; done; echo done")
	spec.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: e.image,
		Command: []string{"sh", "-c", "echo 'db says " + secretValue + " and " + hex.EncodeToString([]byte(secretValue)) + "'; " +
			"printf 'then %s' '" + secretValue[:6] + "'; sleep 0.3; printf '%s\n' '" + secretValue[6:] + "'; echo over; sleep 30"}}}
	a := e.assign(t, spec)
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue)}}
	rec := newRecorder()
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the sidecar's last line", func() bool {
		for _, ev := range rec.all() {
			if ev.GetNote().GetText() == "[db] over" {
				return true
			}
		}
		return false
	})
	if _, err := e.exec.Inject(a.TaskId, a.Attempt, 1, "go"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	var notes []string
	for _, ev := range rec.all() {
		if n := ev.GetNote(); n != nil {
			notes = append(notes, n.GetText())
		}
		noSecretIn(t, "an event", ev.String())
	}
	all := strings.Join(notes, "\n")
	if !strings.Contains(all, "[db] db says [redacted:db-password] and [redacted:db-password]") {
		t.Fatalf("the sidecar's line is not among the notes, redacted: %q", notes)
	}
	if !strings.Contains(all, "[redacted:db-password]\n[db] over") || strings.Contains(all, secretValue[:6]) || strings.Contains(all, secretValue[6:]) {
		t.Fatalf("the secret the sidecar wrote in two pieces is not redacted whole: %q", notes)
	}
}

// TestRedactionGoesOnAfterAnAgentRestart: the agent stops while the task is
// printing its secret (half of it written), the task prints the rest and
// more while no agent runs, and a new agent resumes it from the spool's
// assignment, which names the secret but holds no value. It sends none of
// the task's output until the coordinator's adoption hands it the value
// again; then the output, both sides of the restart put together, has the
// secret redacted and nothing lost.
func TestRedactionGoesOnAfterAnAgentRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a := e.assign(t, e.sh(`echo start; printf 'one=%s' "${S:0:6}"; sleep 2; printf '%s\n' "${S:6}"; `+
		`echo "two=$(printf %s "$S" | base64)"; echo end`))
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue), Env: "S"}}
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	first := newRecorder()
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the task's first line", func() bool {
		return strings.Contains(streamText(first, podiumv1.LogStream_LOG_STREAM_STDOUT), "start\n")
	})
	stop()
	waitDone(t, done, 30*time.Second)

	// The task ends while no agent runs.
	wc, ec := e.docker.ContainerWait(context.Background(), executor.ContainerName(key), container.WaitConditionNotRunning)
	select {
	case <-wc:
	case err := <-ec:
		t.Fatal(err)
	}

	// What the spool gives back: the names, no values.
	spooled := proto.Clone(a).(*podiumv1.Assign)
	for _, s := range spooled.Secrets {
		s.Value = nil
	}
	second := newRecorder()
	ex := e.newExecutor()
	done, err = ex.Resume(context.Background(), spooled, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the resumed run to say it holds the output", func() bool {
		return strings.Contains(e.logs.String(), "holding the output of a resumed task")
	})
	if got := streamText(second, podiumv1.LogStream_LOG_STREAM_STDOUT); got != "" {
		t.Fatalf("output sent before the secrets came back: %q", got)
	}
	ex.Adopted(key.TaskID, key.Attempt, a.Secrets)
	waitDone(t, done, 60*time.Second)
	if st := second.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	got := streamText(first, podiumv1.LogStream_LOG_STREAM_STDOUT) + streamText(second, podiumv1.LogStream_LOG_STREAM_STDOUT)
	if want := "start\none=[redacted:db-password]\ntwo=[redacted:db-password]\nend\n"; got != want {
		t.Fatalf("stdout across the restart %q, want %q", got, want)
	}
	for _, ev := range append(first.all(), second.all()...) {
		noSecretIn(t, "an event", ev.String())
	}
	noSecretIn(t, "the executors' log", e.logs.String())
}

// TestOutputWithheldWhenTheSecretsDoNotComeBack: a resumed attempt whose
// adoption carries no values for its secrets sends none of its output, says
// why in a note, and still ends with its status.
func TestOutputWithheldWhenTheSecretsDoNotComeBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a := e.assign(t, e.sh(`echo start; sleep 1; printf '%s\n' "$S"; echo end`))
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue), Env: "S"}}
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	first := newRecorder()
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the task's first line", func() bool {
		return strings.Contains(streamText(first, podiumv1.LogStream_LOG_STREAM_STDOUT), "start\n")
	})
	stop()
	waitDone(t, done, 30*time.Second)
	spooled := proto.Clone(a).(*podiumv1.Assign)
	spooled.Secrets[0].Value = nil
	second := newRecorder()
	ex := e.newExecutor()
	done, err = ex.Resume(context.Background(), spooled, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	ex.Adopted(key.TaskID, key.Attempt, nil)
	waitDone(t, done, 60*time.Second)
	if st := second.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	if got := streamText(second, podiumv1.LogStream_LOG_STREAM_STDOUT); got != "" {
		t.Fatalf("withheld output was sent: %q", got)
	}
	var notes bytes.Buffer
	for _, ev := range second.all() {
		notes.WriteString(ev.GetNote().GetText())
	}
	if !strings.Contains(notes.String(), "output withheld: the coordinator did not send the values of its secrets db-password again") {
		t.Fatalf("no note says the output was withheld: %q", notes.String())
	}
}

// TestFileSecretOnTmpfsForTheTasksUser: a file secret is at
// /run/secrets/NAME on a tmpfs, mode 0400 and owned by the user the task
// runs as (not root), readable by it; it is not in the container's
// configuration (docker inspect), where an env secret is, as documented; and
// nothing of it is left once the task is torn down.
func TestFileSecretOnTmpfsForTheTasksUser(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const fileValue = "-----BEGIN KEY-----\nZmlsZS1zZWNyZXQtdmFsdWU=\n-----END KEY-----\n"
	spec := e.sh(`until ls /run/podium/inbox/*.msg >/dev/null 2>&1; do sleep 0.05; done; ` +
		`stat -c '%a %u:%g' /run/secrets/deploy.pem; id -u; grep -c ' /run/secrets tmpfs ' /proc/mounts; ` +
		`cat /run/secrets/deploy.pem | wc -c; cat /run/secrets/deploy.pem`)
	spec.User = "1234:1234"
	a := e.assign(t, spec)
	a.Secrets = []*podiumv1.SecretValue{
		{Name: "deploy-key", Value: []byte(fileValue), File: "deploy.pem"},
		{Name: "db-password", Value: []byte(secretValue), Env: "PGPASSWORD"},
	}
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	rec := newRecorder()
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	info, err := e.docker.ContainerInspect(context.Background(), executor.ContainerName(key))
	if err != nil {
		t.Fatal(err)
	}
	inspected := fmt.Sprintf("%+v %+v %+v", info.Config, info.HostConfig, info.Mounts)
	if strings.Contains(inspected, "ZmlsZS1zZWNyZXQtdmFsdWU") {
		t.Fatal("the file secret is in the container's configuration")
	}
	if !strings.Contains(inspected, "PGPASSWORD="+secretValue) {
		t.Fatal("the env secret is not in the container's environment")
	}
	if _, err := e.exec.Inject(key.TaskID, key.Attempt, 1, "go"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	want := fmt.Sprintf("400 1234:1234\n1234\n1\n%d\n[redacted:deploy-key]", len(fileValue))
	if got := streamText(rec, podiumv1.LogStream_LOG_STREAM_STDOUT); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	if cs := containersOf(t, e, key); len(cs) != 0 {
		t.Fatalf("the task's container is left: %v", cs)
	}
	if strings.Contains(e.logs.String(), "ZmlsZS1zZWNyZXQtdmFsdWU") || strings.Contains(e.logs.String(), secretValue) {
		t.Fatal("the executor's log holds a secret's value")
	}
}

// TestSidecarNeverReadyReasonIsRedacted: the reason of a task whose sidecar
// never became ready quotes the sidecar's last lines; the secret in them is
// redacted in the status and in the executor's log.
func TestSidecarNeverReadyReasonIsRedacted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spec := e.sh("echo never")
	spec.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: e.image,
		Command:   []string{"sh", "-c", "echo 'connecting with " + secretValue + "'; exit 1"},
		Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 5}}}
	a := e.assign(t, spec)
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue)}}
	rec := newRecorder()
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	st := rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetReason(), "connecting with [redacted:db-password]") {
		t.Fatalf("final status %v", st)
	}
	for _, ev := range rec.all() {
		noSecretIn(t, "an event", ev.String())
	}
	noSecretIn(t, "the executor's log", e.logs.String())
}

// TestCancelWhileWaitingForSecretsWithholdsOutput: a resumed attempt that
// is cancelled (the coordinator no longer holds it, so it sends no values)
// before its secrets came back ends CANCELLED without sending any of its
// output.
func TestCancelWhileWaitingForSecretsWithholdsOutput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a := e.assign(t, e.sh(`echo start; sleep 0.5; printf '%s\n' "$S"; sleep 60`))
	a.Secrets = []*podiumv1.SecretValue{{Name: "db-password", Value: []byte(secretValue), Env: "S"}}
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	first := newRecorder()
	done, err := e.exec.Start(ctx, a, first.emit)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the task's first line", func() bool {
		return strings.Contains(streamText(first, podiumv1.LogStream_LOG_STREAM_STDOUT), "start\n")
	})
	stop()
	waitDone(t, done, 30*time.Second)
	spooled := proto.Clone(a).(*podiumv1.Assign)
	spooled.Secrets[0].Value = nil
	second := newRecorder()
	ex := e.newExecutor()
	done, err = ex.Resume(context.Background(), spooled, first.lastCursor(), second.emit)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Cancel(key.TaskID, key.Attempt, "not held", time.Second) {
		t.Fatal("the resumed run was not found to cancel")
	}
	waitDone(t, done, 60*time.Second)
	if st := second.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("final status %v", st)
	}
	if got := streamText(second, podiumv1.LogStream_LOG_STREAM_STDOUT); got != "" {
		t.Fatalf("output sent without its secrets: %q", got)
	}
	for _, ev := range second.all() {
		noSecretIn(t, "an event", ev.String())
	}
}
