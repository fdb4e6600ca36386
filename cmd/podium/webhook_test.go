package main

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// podium webhook add/ls/rm against a real coordinator: the generated
// secret printed once on stdout, ls's columns, refusals that say what is
// wrong, and rm.
func TestWebhookCommandsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"webhook", "add", "https://hooks.example.com/x", "--events", "task.finished,task.done"}, exitPodium,
			`"task.done" is not an event: the events are task.finished, task.lost, node.offline`},
		{[]string{"webhook", "add", "ftp://hooks.example.com/x"}, exitPodium, "url: \"ftp://hooks.example.com/x\": the scheme must be http or https"},
		{[]string{"webhook", "add"}, exitUsage, "want the URL"},
		{[]string{"webhook", "rm"}, exitUsage, "want the webhook's ID"},
	} {
		if code, _, errOut := podium(c.args...); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("podium %s: exit %d, want %d saying %q:\n%s", c.args, code, c.code, c.says, errOut)
		}
	}
	code, out, errOut := podium("webhook", "add", "https://hooks.example.com/x", "--events", "task.finished, node.offline", "--name", "ci")
	secret := strings.TrimSpace(out)
	if code != 0 || len(secret) != 64 || !strings.Contains(errOut, "added for task.finished, node.offline") || !strings.Contains(errOut, "shown this once") {
		t.Fatalf("webhook add: exit %d, stdout %q:\n%s", code, out, errOut)
	}
	id := strings.Fields(strings.TrimPrefix(errOut, "→ webhook "))[0]
	code, out, _ = podium("webhook", "ls")
	if code != 0 || !strings.Contains(out, "PENDING") || !strings.Contains(out, id) || !strings.Contains(out, "task.finished,node.offline") ||
		strings.Contains(out, secret) {
		t.Fatalf("webhook ls: exit %d:\n%s", code, out)
	}
	if code, _, errOut := podium("webhook", "rm", id); code != 0 || !strings.Contains(errOut, "webhook "+id+" removed") {
		t.Fatalf("webhook rm: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("webhook", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("webhook ls after rm: %s", out)
	}
}
