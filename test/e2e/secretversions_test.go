package e2e

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// TestChangedSecretStaysRedactedAcrossAgentRestart is issue 28's hole 6 as
// a user meets it: a task holds a secret and prints it later (once a message
// reaches its inbox); meanwhile an admin sets the secret to a new value and
// the agent restarts (an apt upgrade does). The container still holds the
// old value, so the restarted agent must be sent that version to redact:
// what the task prints reads [redacted:db-password], in `podium run` and in
// `podium logs`, and the old value is nowhere in either.
func TestChangedSecretStaysRedactedAcrossAgentRestart(t *testing.T) {
	t.Parallel()
	e := newEnvOpts(t, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)}, nil)
	const oldValue, newValue = "old-pa55word-in-the-container", "new-pa55word-set-meanwhile"
	set := func(v string) {
		t.Helper()
		if _, err := e.r.Admin().SetSecret(context.Background(), connect.NewRequest(&podiumv1.SetSecretRequest{
			Name: "db-password", Value: []byte(v)})); err != nil {
			t.Fatal(err)
		}
	}
	set(oldValue)
	f := e.follow("--secret", "db-password=PGPASSWORD", "--image", e.image, "--", "sh", "-c",
		`echo waiting; podium-runner ask >/dev/null; echo "value: $PGPASSWORD"`)
	f.waitStdout(t, "waiting\n")
	id := f.id(t)
	set(newValue)
	e.killAgent()
	e.startAgent()
	if r := e.podium("task", "send", id, "go on"); r.code != 0 {
		t.Fatalf("podium task send: exit %d\n%s", r.code, r.stderr)
	}
	if code := f.wait(t); code != 0 {
		t.Fatalf("podium run exited %d; stderr:\n%s", code, f.stderr.String())
	}
	const want = "waiting\nvalue: [redacted:db-password]\n"
	if got := f.out.String(); got != want || strings.Contains(f.stderr.String(), oldValue) {
		t.Fatalf("podium run printed %q (stderr %q), want %q: the old value must stay redacted", got, f.stderr.String(), want)
	}
	if logs := e.podium("logs", id); string(logs.stdout) != want || strings.Contains(string(logs.stderr), oldValue) {
		t.Fatalf("podium logs printed %q, want %q", logs.stdout, want)
	}
	if tk := e.task(id); tk.Attempt != 1 {
		t.Fatalf("the task ended as attempt %d, want 1: the restarted agent should have adopted it", tk.Attempt)
	}
}
