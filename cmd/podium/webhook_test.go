package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
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

// podium webhook test and redeliver against a real coordinator and a real
// receiver: the test event is signed and shaped like every other (type
// webhook.test, the webhook named); against a receiver that fails, test
// exits 125 with its answer and the event waits out its backoff (an hour
// here); once the receiver is fixed, redeliver makes it due now and the same
// event arrives again; test against a working receiver exits 0; an unknown
// webhook is a usage error.
func TestWebhookTestAndRedeliver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	failing := true
	var got []map[string]any
	var signed []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev)
		signed = append(signed, r.Header.Get("Podium-Signature"))
		if failing {
			http.Error(w, "receiver is down for maintenance", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(recv.Close)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Notify: notify.Config{PollInterval: 20 * time.Millisecond, Timeout: 2 * time.Second, Lease: 3 * time.Second,
			BackoffBase: time.Hour, BackoffCap: time.Hour}})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(args ...string) (int, string, string) {
		tc := newTestCLI(env)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	code, _, errOut := podium("webhook", "add", recv.URL, "--name", "ops")
	if code != 0 {
		t.Fatalf("webhook add: exit %d:\n%s", code, errOut)
	}
	id := strings.Fields(strings.TrimPrefix(errOut, "→ webhook "))[0]

	code, _, errOut = podium("webhook", "test", id)
	if code != exitPodium || !strings.Contains(errOut, "failed") || !strings.Contains(errOut, "503") {
		t.Fatalf("webhook test against a failing receiver: exit %d:\n%s", code, errOut)
	}
	mu.Lock()
	if len(got) != 1 || got[0]["type"] != "webhook.test" || got[0]["schema"] != "podium.event.v1" ||
		got[0]["webhook"].(map[string]any)["id"] != id || !strings.HasPrefix(signed[0], "t=") {
		t.Errorf("the receiver got %v with signature %q; want one signed webhook.test event naming the webhook", got, signed)
	}
	evt := got[0]["id"]
	failing = false
	mu.Unlock()

	code, _, errOut = podium("webhook", "redeliver", id)
	if code != 0 || !strings.Contains(errOut, "→ 1 waiting events of webhook "+id+" are retried now") {
		t.Fatalf("webhook redeliver: exit %d:\n%s", code, errOut)
	}
	wait.For(t, 30*time.Second, "the waiting test event to be delivered again after redeliver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2 && got[1]["id"] == evt
	})
	if code, _, errOut := podium("webhook", "test", id); code != 0 || !strings.Contains(errOut, "→ delivered to "+recv.URL) {
		t.Errorf("webhook test against a working receiver: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("webhook", "test", "hook_01JAAAAAAAAAAAAAAAAAAAAAAA"); code != exitUsage || !strings.Contains(errOut, "no webhook") {
		t.Errorf("webhook test of an unknown webhook: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("webhook", "redeliver", "nope"); code != exitPodium || !strings.Contains(errOut, "is not a webhook id") {
		t.Errorf("webhook redeliver of a bad id: exit %d:\n%s", code, errOut)
	}
}
