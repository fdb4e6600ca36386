package integration_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// helloAgain reconnects node id as an agent that restarted would: a Hello
// reporting the attempts it still runs, and returns the HelloAck.
func helloAgain(t *testing.T, ctx context.Context, r *coordtest.Replica, id, key string, running ...*podiumv1.RunningTask) *podiumv1.HelloAck {
	t.Helper()
	coordtest.Eventually(t, 10*time.Second, "the node's previous session to end", func() bool {
		ns, _ := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && len(ns.Msg.Nodes) == 1 && ns.Msg.Nodes[0].Replica == ""
	})
	st := r.NodeClient().Stream(ctx)
	t.Cleanup(func() { _ = st.CloseRequest(); _ = st.CloseResponse() })
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Running: running}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	return m.GetHelloAck()
}

// Issue 28, hole 6: a secret set again while a task holds its old value,
// then the task's agent restarts. The adoption must re-send the version the
// container holds (the one current at its assignment), not the new one:
// with the new one the agent's redactor would not know the old value, and
// the task printing it would show it in clear. A task assigned after the
// change gets the new version, and `secret ls` counts the versions.
func TestAdoptionResendsTheVersionTheTaskWasAssigned(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const oldValue, newValue = "old-value-the-container-holds", "new-value-set-later"
	set := func(v string) {
		t.Helper()
		if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "db-password", Value: []byte(v)})); err != nil {
			t.Fatal(err)
		}
	}
	set(oldValue)
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	first := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: "db-password", Env: "PGPASSWORD"}}})
	a := assignOf(t, node)
	if a.TaskId != first || len(a.Secrets) != 1 || string(a.Secrets[0].Value) != oldValue {
		t.Fatalf("Assign of %s carries %v, want db-password's first value", first, a.Secrets)
	}
	node.send(t, status(first, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, first, podiumv1.TaskState_TASK_STATE_RUNNING)

	set(newValue)
	second := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: "db-password", Env: "PGPASSWORD"}}})
	b := assignOf(t, node)
	if b.TaskId != second || len(b.Secrets) != 1 || string(b.Secrets[0].Value) != newValue {
		t.Fatalf("Assign of %s (submitted after the change) carries %v, want the new value", second, b.Secrets)
	}
	node.send(t, status(second, b.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, second, podiumv1.TaskState_TASK_STATE_RUNNING)

	// The agent restarts (an apt upgrade) holding both attempts.
	cancelStream(node)
	ack := helloAgain(t, ctx, r, id, key,
		&podiumv1.RunningTask{TaskId: first, Attempt: a.Attempt, LastSeq: 1},
		&podiumv1.RunningTask{TaskId: second, Attempt: b.Attempt, LastSeq: 1})
	got := map[string]string{}
	for _, ad := range ack.GetAdopt() {
		if !ad.Keep || len(ad.Secrets) != 1 || ad.Secrets[0].Name != "db-password" || ad.Secrets[0].Env != "PGPASSWORD" {
			t.Fatalf("adopt %v, want the task kept with db-password as PGPASSWORD", ad)
		}
		got[ad.TaskId] = string(ad.Secrets[0].Value)
	}
	if got[first] != oldValue || got[second] != newValue {
		t.Fatalf("adoption re-sent %q to the first task and %q to the second; want each the value it was assigned (%q, %q)",
			got[first], got[second], oldValue, newValue)
	}
	ls, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 1 || ls.Msg.Secrets[0].Version != 2 {
		t.Fatalf("ListSecrets after setting db-password twice: %v, %v; want it at version 2", ls, err)
	}
	// The version kept for the first task is sealed like the current one:
	// neither value is in the database's dump, in the clear or as hex.
	dump := pgDump(t, db)
	if !strings.Contains(dump, "secret_versions") {
		t.Fatalf("pg_dump has no podium.secret_versions table; is it the right database?\n%.2000s", dump)
	}
	for _, v := range []string{oldValue, newValue} {
		if strings.Contains(dump, v) || strings.Contains(dump, hex.EncodeToString([]byte(v))) {
			t.Fatalf("pg_dump holds the value %q of db-password (a kept version must be sealed)", v)
		}
	}
}

// Issue 28, hole 1's last sentence: the signing secret the coordinator
// generates for a webhook used to be stored as a user secret
// (webhook-<id>), which any task could name, to receive its value
// (--secret) or have the coordinator sign a body of its choosing with it
// (notify[].secret). It is the coordinator's own now: a task naming it is
// refused as naming a missing secret, and nothing is stored; the list of
// secrets does not hold it. (TestWebhooksDeliverSubscribedEvents checks the
// webhook still signs with it.)
func TestWebhookSigningSecretIsNoTaskSecret(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(false)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hook, err := r.Webhooks().Add(ctx, connect.NewRequest(&podiumv1.WebhookServiceAddRequest{Url: "https://hooks.example.com/x"}))
	if err != nil || len(hook.Msg.Secret) != 64 {
		t.Fatalf("add a webhook with a generated secret: %v, %v", hook, err)
	}
	// The name the coordinator used to store it under.
	name := "webhook-" + strings.ToLower(strings.TrimPrefix(hook.Msg.Webhook.Id, "hook_"))
	for what, spec := range map[string]*podiumv1.TaskSpec{
		"--secret":        {Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: name, Env: "SIGNING_KEY"}}},
		"notify[].secret": {Image: "busybox", Notify: []*podiumv1.Notify{{Url: "https://attacker.example.com/", Secret: name}}},
	} {
		_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no secret named "+name) {
			t.Errorf("a task naming the webhook's signing secret in %s: %v, want it refused as no secret named %s", what, err, name)
		}
	}
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil || len(list.Msg.Tasks) != 0 {
		t.Fatalf("tasks after the refused submits: %v, %v; want none", list, err)
	}
	ls, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 0 {
		t.Fatalf("ListSecrets after adding a webhook: %v, %v; want no secret", ls, err)
	}
}

// A node that gives an assignment back never started its container, so the
// attempt offered again is a new delivery of the secrets: it carries the
// version current then, not the one the given-back offer pinned (a value
// rotated out while the task waited for a slot).
func TestGivenBackAssignmentPinsTheCurrentVersion(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	set := func(v string) {
		t.Helper()
		if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "api-key", Value: []byte(v)})); err != nil {
			t.Fatal(err)
		}
	}
	set("rotated-out-value")
	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 1})
	next := receiveHeartbeating(t, ctx, node, 0)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: "api-key", Env: "API_KEY"}}})
	a := next()
	if len(a.Secrets) != 1 || string(a.Secrets[0].Value) != "rotated-out-value" {
		t.Fatalf("first offer of %s carries %v", task, a.Secrets)
	}
	set("current-value")
	node.send(t, giveBack(task, a.Attempt, 1))
	b := next()
	if b.TaskId != task || b.Attempt != a.Attempt || len(b.Secrets) != 1 || string(b.Secrets[0].Value) != "current-value" {
		t.Fatalf("the offer after the give-back is %s attempt %d with %v; want attempt %d with the value set since",
			b.TaskId, b.Attempt, b.Secrets, a.Attempt)
	}
}
