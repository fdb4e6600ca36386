package integration_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// hooksConfig is the delivery worker with test-sized backoffs: retries in
// tens of milliseconds rather than seconds.
func hooksConfig(allowPrivate bool) notify.Config {
	return notify.Config{PollInterval: 20 * time.Millisecond, Timeout: 2 * time.Second, Lease: 3 * time.Second,
		BackoffBase: 10 * time.Millisecond, BackoffCap: 40 * time.Millisecond, AllowPrivate: allowPrivate}
}

// post is one request a receiver got, and what it answered.
type post struct {
	header http.Header
	body   []byte
	status int
}

// receiver is a webhook receiver: it records every POST and answers 500
// to the first failFirst of them, or to all while failing is set.
type receiver struct {
	url       string
	mu        sync.Mutex
	failFirst int
	failing   bool
	posts     []post
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	t.Helper()
	rc := &receiver{failFirst: failFirst}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		rc.mu.Lock()
		status := http.StatusNoContent
		if len(rc.posts) < rc.failFirst || rc.failing {
			status = http.StatusInternalServerError
		}
		rc.posts = append(rc.posts, post{header: req.Header.Clone(), body: body, status: status})
		rc.mu.Unlock()
		if status != http.StatusNoContent {
			http.Error(w, "receiver down for maintenance", status)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/hook"
	return rc
}

func (rc *receiver) got() []post {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.posts)
}

func (rc *receiver) setFailing(f bool) {
	rc.mu.Lock()
	rc.failing = f
	rc.mu.Unlock()
}

// event is the podium.event.v1 JSON as a receiver decodes it.
type event struct {
	Schema    string    `json:"schema"`
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Task      *struct {
		ID         string     `json:"id"`
		State      string     `json:"state"`
		ExitCode   *int       `json:"exit_code"`
		User       string     `json:"user"`
		Labels     []string   `json:"labels"`
		Node       *string    `json:"node"`
		Attempt    int        `json:"attempt"`
		CreatedAt  time.Time  `json:"created_at"`
		FinishedAt *time.Time `json:"finished_at"`
	} `json:"task"`
	Node *struct {
		ID       string `json:"id"`
		Hostname string `json:"hostname"`
		Status   string `json:"status"`
	} `json:"node"`
}

// decode checks p is a well-formed, correctly signed delivery (when secret
// is not nil) and returns its event.
func decode(t *testing.T, p post, secret []byte) event {
	t.Helper()
	var ev event
	if err := json.Unmarshal(p.body, &ev); err != nil {
		t.Fatalf("event body %s: %v", p.body, err)
	}
	if ev.Schema != "podium.event.v1" || !strings.HasPrefix(ev.ID, "evt_") || ev.CreatedAt.IsZero() {
		t.Fatalf("event %s: want schema podium.event.v1, an evt_ id and created_at", p.body)
	}
	if p.header.Get(notify.HeaderEventID) != ev.ID || p.header.Get(notify.HeaderEventType) != ev.Type {
		t.Fatalf("headers %v do not name event %s of type %s", p.header, ev.ID, ev.Type)
	}
	if ct, ua := p.header.Get("Content-Type"), p.header.Get("User-Agent"); ct != "application/json" || !strings.HasPrefix(ua, "podium/") {
		t.Fatalf("Content-Type %q, User-Agent %q: want application/json and podium/<version>", ct, ua)
	}
	if secret != nil {
		if err := notify.Verify(secret, p.header.Get(notify.HeaderSignature), p.body, time.Now(), 0); err != nil {
			t.Fatalf("event %s: %v (header %q)", ev.ID, err, p.header.Get(notify.HeaderSignature))
		}
	}
	return ev
}

// outbox lists what waits in r's outbox.
func outbox(t *testing.T, r *coordtest.Replica) []store.OutboxEntry {
	t.Helper()
	rows, err := r.Store().ListOutbox(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func submitSpec(t *testing.T, ctx context.Context, c podiumv1connect.TaskServiceClient, spec *podiumv1.TaskSpec) string {
	t.Helper()
	res, err := c.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.Task.Id
}

// cancelQueued submits a task no node runs and cancels it: a task.finished
// event with no node involved.
func cancelQueued(t *testing.T, ctx context.Context, r *coordtest.Replica, spec *podiumv1.TaskSpec) string {
	t.Helper()
	id := submitSpec(t, ctx, r.Tasks(), spec)
	if _, err := r.Tasks().Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	return id
}

// Issue 19, test 1: a receiver subscribed to task.finished gets exactly the
// task.finished events of the tasks that ended (succeeded, failed,
// cancelled), each signed with the secret generated for it and carrying the
// task's fields, and not the node.offline event; a second webhook
// subscribed to node.offline, signing with a stored secret, gets just that
// when the watchdog marks the node offline.
func TestWebhooksDeliverSubscribedEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(false),
		Nodes: nodes.Config{HeartbeatInterval: 500 * time.Millisecond}, // the sim node never beats
		// Long enough for the tasks to end first, on a busy machine.
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: 4 * time.Second, OfflineAfter: 8 * time.Second},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	finished, offline := newReceiver(t, 0), newReceiver(t, 0)
	a, err := r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: finished.url, Events: []string{"task.finished"}}))
	if err != nil {
		t.Fatal(err)
	}
	secretA := []byte(a.Msg.Secret)
	if len(secretA) != 64 || a.Msg.Webhook.SecretName != "" {
		t.Fatalf("add without a secret name: secret %q under %q, want 64 hex digits kept by the coordinator, under no secret's name", secretA, a.Msg.Webhook.SecretName)
	}
	if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "pager-key", Value: []byte("pager signing key")})); err != nil {
		t.Fatal(err)
	}
	b, err := r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: offline.url,
		Events: []string{"node.offline"}, SecretName: "pager-key", Name: "pager"}))
	if err != nil {
		t.Fatal(err)
	}
	if b.Msg.Secret != "" {
		t.Fatalf("add with --secret-name showed a secret %q", b.Msg.Secret)
	}

	id, key := enroll(t, r, "ml")
	node, _ := connectNode(t, ctx, r, id, key) // two slots
	spec := &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"ml"}}
	ok, bad := submitSpec(t, ctx, r.Tasks(), spec), submitSpec(t, ctx, r.Tasks(), spec)
	var assigns []*podiumv1.Assign
	for len(assigns) < 2 {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for both assignments: %v", err)
		}
		if as := m.GetAssign(); as != nil {
			assigns = append(assigns, as)
		}
	}
	// Both slots are taken, so this one stays queued until cancelled.
	cancelled := cancelQueued(t, ctx, r, spec)
	zero, one := int32(0), int32(1)
	for _, as := range assigns {
		end, code := podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero
		if as.TaskId == bad {
			end, code = podiumv1.TaskState_TASK_STATE_FAILED, &one
		}
		node.send(t, status(as.TaskId, as.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil),
			status(as.TaskId, as.Attempt, 2, end, code))
	}
	want := map[string]string{ok: "succeeded", bad: "failed", cancelled: "cancelled"}
	coordtest.Eventually(t, 20*time.Second, "the three task.finished events delivered", func() bool { return len(finished.got()) >= 3 })
	coordtest.Eventually(t, 20*time.Second, "the watchdog's node.offline event delivered", func() bool { return len(offline.got()) >= 1 })
	coordtest.Eventually(t, 10*time.Second, "the outbox to empty", func() bool { return len(outbox(t, r)) == 0 })

	got := finished.got()
	if len(got) != 3 {
		t.Fatalf("the task.finished receiver got %d posts, want exactly 3", len(got))
	}
	for _, p := range got {
		ev := decode(t, p, secretA)
		if ev.Type != "task.finished" || ev.Task == nil || ev.Node != nil {
			t.Fatalf("task.finished receiver got %s", p.body)
		}
		st, known := want[ev.Task.ID]
		if !known {
			t.Fatalf("event for task %s, which was not run (or twice): %s", ev.Task.ID, p.body)
		}
		delete(want, ev.Task.ID)
		if ev.Task.State != st || ev.Task.User == "" || !slices.Equal(ev.Task.Labels, spec.Labels) ||
			ev.Task.FinishedAt == nil || ev.Task.CreatedAt.IsZero() {
			t.Fatalf("event for a %s task: %s", st, p.body)
		}
		if st != "cancelled" && (ev.Task.Node == nil || *ev.Task.Node != id || ev.Task.Attempt != 1 || ev.Task.ExitCode == nil) {
			t.Fatalf("event for a task run on %s: %s", id, p.body)
		}
		if st == "failed" && *ev.Task.ExitCode != 1 || st == "succeeded" && *ev.Task.ExitCode != 0 {
			t.Fatalf("exit code in %s", p.body)
		}
	}
	gotOff := offline.got()
	if len(gotOff) != 1 {
		t.Fatalf("the node.offline receiver got %d posts, want exactly 1", len(gotOff))
	}
	if ev := decode(t, gotOff[0], []byte("pager signing key")); ev.Type != "node.offline" || ev.Node == nil || ev.Node.ID != id ||
		ev.Node.Status != "offline" || ev.Task != nil {
		t.Fatalf("node.offline receiver got %s", gotOff[0].body)
	}
	// What an admin sees: both delivered, nothing pending.
	ls, err := r.Webhooks().List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Msg.Webhooks) != 2 {
		t.Fatalf("webhook ls: %v", ls.Msg.Webhooks)
	}
	for _, w := range ls.Msg.Webhooks {
		if w.LastStatus != store.DeliveryDelivered || w.Pending != 0 || w.LastAttemptAt == nil {
			t.Fatalf("webhook ls: %v, want delivered with nothing pending", w)
		}
	}
}

// Issue 19, test 2: a receiver that answers 500 three times and then 204
// gets the event a fourth time, not lost: exactly four POSTs, all with the
// same event id and body, and nothing after.
func TestWebhookRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(false)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := newReceiver(t, 3)
	add, err := r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: rc.url}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(add.Msg.Webhook.Events, notify.Events) {
		t.Fatalf("events by default: %v, want %v", add.Msg.Webhook.Events, notify.Events)
	}
	task := cancelQueued(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	coordtest.Eventually(t, 20*time.Second, "a successful delivery", func() bool {
		p := rc.got()
		return len(p) > 0 && p[len(p)-1].status == http.StatusNoContent
	})
	coordtest.Eventually(t, 10*time.Second, "the outbox to empty", func() bool { return len(outbox(t, r)) == 0 })
	got := rc.got()
	if len(got) != 4 {
		t.Fatalf("the receiver got %d POSTs, want exactly 4 (3 failed, 1 delivered)", len(got))
	}
	first := decode(t, got[0], []byte(add.Msg.Secret))
	for i, p := range got {
		ev := decode(t, p, []byte(add.Msg.Secret))
		if ev.ID != first.ID || string(p.body) != string(got[0].body) || ev.Task.ID != task {
			t.Fatalf("POST %d is event %s (%s), want the same event %s every time", i+1, ev.ID, p.body, first.ID)
		}
		if wantStatus := map[bool]int{true: 500, false: 204}[i < 3]; p.status != wantStatus {
			t.Fatalf("POST %d answered %d, want %d", i+1, p.status, wantStatus)
		}
	}
	ls, err := r.Webhooks().List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if w := ls.Msg.Webhooks[0]; w.LastStatus != store.DeliveryDelivered || w.Pending != 0 {
		t.Fatalf("webhook ls after the retries: %v", w)
	}
}

// Issue 19, test 3: the event waiting for a failing receiver is in
// Postgres, not in the replica: stopped mid-retry, and a new replica on the
// same database delivers it, with the same id, once the receiver is back.
func TestWebhookSurvivesRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	opts := coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(false)}
	r1 := coordtest.Start(t, db.URL, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := newReceiver(t, 0)
	rc.setFailing(true)
	add, err := r1.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: rc.url, Events: []string{"task.finished"}}))
	if err != nil {
		t.Fatal(err)
	}
	cancelQueued(t, ctx, r1, &podiumv1.TaskSpec{Image: "busybox"})
	coordtest.Eventually(t, 20*time.Second, "two failed attempts", func() bool { return len(rc.got()) >= 2 })
	pending := outbox(t, r1)
	if len(pending) != 1 || pending[0].Attempts < 2 || !strings.Contains(pending[0].LastError, "500") {
		t.Fatalf("outbox while the receiver fails: %+v, want one row with its attempts and the 500", pending)
	}
	ls, err := r1.Webhooks().List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if w := ls.Msg.Webhooks[0]; w.LastStatus != store.DeliveryFailed || w.Pending != 1 || !strings.Contains(w.LastError, "receiver down") {
		t.Fatalf("webhook ls while failing: %v, want failed, 1 pending, the receiver's answer", w)
	}
	r1.Stop()
	before := len(rc.got())
	rc.setFailing(false)
	r2 := coordtest.Start(t, db.URL, opts)
	coordtest.Eventually(t, 20*time.Second, "the new replica to deliver the event", func() bool {
		p := rc.got()
		return p[len(p)-1].status == http.StatusNoContent
	})
	coordtest.Eventually(t, 10*time.Second, "the outbox to empty", func() bool { return len(outbox(t, r2)) == 0 })
	got := rc.got()
	if len(got) <= before {
		t.Fatalf("no POST after the restart")
	}
	first := decode(t, got[0], []byte(add.Msg.Secret))
	for i, p := range got {
		if ev := decode(t, p, []byte(add.Msg.Secret)); ev.ID != first.ID {
			t.Fatalf("POST %d is event %s, want %s on every attempt", i+1, ev.ID, first.ID)
		}
	}
	if n := len(got); got[n-1].status != http.StatusNoContent || slices.ContainsFunc(got[:n-1], func(p post) bool { return p.status == 204 }) {
		t.Fatalf("want failures then exactly one delivery, the last POST")
	}
}

// Issue 19, test 4: bad input is refused with the field named and nothing
// stored: a member adding a webhook, a bad URL, an unknown event, a missing
// secret, a 101st webhook.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(false)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	member := podiumv1connect.NewWebhookServiceClient(coordtest.HTTPClient(), r.URL(),
		connect.WithInterceptors(hdr(addUser(t, r, "alice", "member"))))
	_, err := member.Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x"}))
	wantDenied(t, "a member adding a webhook", err, "WebhookService.Add needs the admin role")
	_, err = member.List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	wantDenied(t, "a member listing webhooks", err, "admin")

	for _, c := range []struct {
		req  *podiumv1.WebhookServiceAddRequest
		code connect.Code
		says string
	}{
		{&podiumv1.WebhookServiceAddRequest{}, connect.CodeInvalidArgument, "url: empty"},
		{&podiumv1.WebhookServiceAddRequest{Url: "ftp://hooks.example.com/x"}, connect.CodeInvalidArgument, "scheme must be http or https"},
		{&podiumv1.WebhookServiceAddRequest{Url: "https://bob:pw@hooks.example.com/x"}, connect.CodeInvalidArgument, "user name or password"},
		{&podiumv1.WebhookServiceAddRequest{Url: "/relative"}, connect.CodeInvalidArgument, "url:"},
		{&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/" + strings.Repeat("a", 2048)}, connect.CodeInvalidArgument, "longer than 2048"},
		{&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x", Events: []string{"task.done"}}, connect.CodeInvalidArgument,
			"events: \"task.done\" is not an event: the events are task.finished, task.lost, node.offline"},
		{&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x", Name: "Bad Name"}, connect.CodeInvalidArgument, "name:"},
		{&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x", SecretName: "nope"}, connect.CodeFailedPrecondition,
			"podium secret set nope"},
	} {
		_, err := r.Webhooks().Add(ctx, connect.NewRequest(c.req))
		if connect.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("add %v: %v, want %v saying %q", c.req, err, c.code, c.says)
		}
	}
	_, err = r.Webhooks().Remove(ctx, connect.NewRequest(&podiumv1.WebhookServiceRemoveRequest{Id: "hook_0123456789ABCDEFGHJKMNPQRS"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("remove a webhook that is not there: %v", err)
	}
	ls, err := r.Webhooks().List(ctx, connect.NewRequest(&podiumv1.WebhookServiceListRequest{}))
	if err != nil || len(ls.Msg.Webhooks) != 0 {
		t.Fatalf("after refused adds: %v %v, want no webhooks", ls, err)
	}
	secrets, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(secrets.Msg.Secrets) != 0 {
		t.Fatalf("after refused adds: secrets %v %v, want none generated", secrets, err)
	}

	var first string
	for i := range store.MaxWebhooks {
		res, err := r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{
			Url: "https://hooks.example.com/x", Events: []string{"node.offline"}}))
		if err != nil {
			t.Fatalf("webhook %d: %v", i+1, err)
		}
		if i == 0 {
			first = res.Msg.Webhook.Id
		}
	}
	_, err = r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x"}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "podium webhook rm") {
		t.Fatalf("webhook 101: %v, want ResourceExhausted saying how to make room", err)
	}
	if _, err := r.Webhooks().Remove(ctx, connect.NewRequest(&podiumv1.WebhookServiceRemoveRequest{Id: first})); err != nil {
		t.Fatal(err)
	}
	// The generated signing secrets are the coordinator's, on the webhooks'
	// rows: none is among the secrets tasks may name.
	secrets, err = r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(secrets.Msg.Secrets) != 0 {
		t.Fatalf("after adding %d webhooks and removing one: %d secrets (%v), want none: their signing secrets are no user secrets", store.MaxWebhooks, len(secrets.Msg.Secrets), err)
	}
	audit, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{Limit: 500}))
	if err != nil {
		t.Fatal(err)
	}
	var added, removed, refused int
	for _, a := range audit.Msg.Entries {
		switch {
		case a.Action == "WebhookService.Add" && a.Result == "ok":
			added++
		case a.Action == "WebhookService.Remove" && a.Result == "ok" && a.Target == first:
			removed++
		case a.Action == "WebhookService.Add":
			refused++
		}
	}
	if added != store.MaxWebhooks || removed != 1 || refused < 9 {
		t.Fatalf("audit: %d adds, %d removes, %d refused adds; want %d, 1, at least 9", added, removed, refused, store.MaxWebhooks)
	}
}

// A task's own notify: entries get its events. Without
// --notify-allow-private a loopback target is not posted to: the outbox row
// says why. With it the target gets the event, signed with the stored
// secret the entry names; an entry asking for task.lost only gets nothing
// from a task that finished. A notify secret that is not stored is refused
// at submit, as a secret is.
func TestTaskNotify(t *testing.T) {
	t.Parallel()
	t.Run("refused without the flag", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db := pgtest.NewDatabase(t)
		r := coordtest.Start(t, db.URL, coordtest.Options{Notify: hooksConfig(false)})
		rc := newReceiver(t, 0)
		cancelQueued(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Notify: []*podiumv1.Notify{{Url: rc.url}}})
		var row store.OutboxEntry
		coordtest.Eventually(t, 20*time.Second, "the refused attempt recorded", func() bool {
			rows := outbox(t, r)
			if len(rows) == 1 {
				row = rows[0]
			}
			// Attempts counts a claim at once; the error comes with the
			// attempt's outcome.
			return row.LastError != ""
		})
		if !strings.Contains(row.LastError, "127.0.0.1 is a loopback, private") || !strings.Contains(row.LastError, "--notify-allow-private") ||
			row.WebhookID != nil || row.EventType != "task.finished" {
			t.Fatalf("outbox row %+v, want the refusal and what allows it", row)
		}
		if n := len(rc.got()); n != 0 {
			t.Fatalf("the loopback receiver got %d POSTs", n)
		}
	})
	t.Run("allowed with the flag", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db := pgtest.NewDatabase(t)
		r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(true)})
		if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "ci-hook", Value: []byte("ci key")})); err != nil {
			t.Fatal(err)
		}
		_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox",
			Notify: []*podiumv1.Notify{{Url: "https://ci.example.com/x", Secret: "missing-key"}}}}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "missing-key") {
			t.Fatalf("submit naming a notify secret that is not stored: %v", err)
		}
		signed, lostOnly := newReceiver(t, 0), newReceiver(t, 0)
		task := cancelQueued(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Notify: []*podiumv1.Notify{
			{Url: signed.url, Secret: "ci-hook"}, {Url: lostOnly.url, Events: []string{"task.lost"}}}})
		coordtest.Eventually(t, 20*time.Second, "the task's notify target to get its event", func() bool { return len(signed.got()) == 1 })
		coordtest.Eventually(t, 10*time.Second, "the outbox to empty", func() bool { return len(outbox(t, r)) == 0 })
		if ev := decode(t, signed.got()[0], []byte("ci key")); ev.Type != "task.finished" || ev.Task.ID != task || ev.Task.State != "cancelled" {
			t.Fatalf("notify target got %s", signed.got()[0].body)
		}
		if n := len(lostOnly.got()); n != 0 {
			t.Fatalf("the task.lost-only target got %d POSTs for a cancelled task", n)
		}
	})
}
