package integration_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// pgDump is the whole database as pg_dump writes it (schema and data).
func pgDump(t *testing.T, db pgtest.Database) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(pgtest.BinDir, "pg_dump"), "--dbname="+db.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "podium.secrets") {
		t.Fatalf("pg_dump has no podium.secrets table; is it the right database?\n%.2000s", out)
	}
	return string(out)
}

// A secret set through the admin API reaches the node that is given a task
// naming it, in its Assign, and again in the HelloAck's Adopt after the node
// reconnects holding the attempt; and nowhere else: not in the database
// (pg_dump, in the clear or as the task's spec), not in `task get`, not in
// ListSecrets, not in the coordinator's log (at debug, which logs every
// Assign).
func TestSecretReachesOnlyTheNodesAssignment(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const value = "pa55-w0rd-only-the-node-sees"
	set, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "db-password", Value: []byte(value)}))
	if err != nil || !set.Msg.Created {
		t.Fatalf("SetSecret = %v, %v", set, err)
	}
	ls, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 1 || ls.Msg.Secrets[0].Name != "db-password" || ls.Msg.Secrets[0].SetBy != "token" || ls.Msg.Secrets[0].SetAt == nil {
		t.Fatalf("ListSecrets = %v, %v; want db-password set by token", ls, err)
	}
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{
		{Name: "db-password", Env: "PGPASSWORD", File: "pw"}}})
	a := assignOf(t, node)
	if a.TaskId != task || len(a.Secrets) != 1 || string(a.Secrets[0].Value) != value ||
		a.Secrets[0].Name != "db-password" || a.Secrets[0].Env != "PGPASSWORD" || a.Secrets[0].File != "pw" {
		t.Fatalf("Assign of %s carries secrets %v, want db-password's value as PGPASSWORD and pw", task, a.Secrets)
	}
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	got := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	js, _ := protojson.Marshal(got)
	if strings.Contains(string(js), value) || len(got.Spec.GetSecrets()) != 1 || got.Spec.GetSecrets()[0].Name != "db-password" {
		t.Fatalf("task get shows %s; want the secret's name and never its value", js)
	}
	// The node comes back holding the attempt: the HelloAck adopts it and
	// carries the value again, for redaction.
	cancelStream(node)
	coordtest.Eventually(t, 10*time.Second, "the session to end", func() bool {
		ns, _ := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && ns.Msg.Nodes[0].Replica == ""
	})
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Running: []*podiumv1.RunningTask{{TaskId: task, Attempt: a.Attempt, LastSeq: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	adopt := m.GetHelloAck().GetAdopt()
	if len(adopt) != 1 || !adopt[0].Keep || len(adopt[0].Secrets) != 1 || string(adopt[0].Secrets[0].Value) != value || adopt[0].Secrets[0].Env != "PGPASSWORD" {
		t.Fatalf("adopt %v, want the task kept with db-password's value", adopt)
	}
	// bytea columns are dumped in hex: the value must not be there either.
	if dump := pgDump(t, db); strings.Contains(dump, value) || strings.Contains(dump, hex.EncodeToString([]byte(value))) || !strings.Contains(dump, "db-password") {
		t.Fatal("pg_dump of the database holds the secret's value, in the clear or in hex (or not even its name)")
	}
	if l := logs.String(); strings.Contains(l, value) || !strings.Contains(l, "assigning task") || !strings.Contains(l, "secret set") {
		t.Fatalf("the coordinator's log holds the value, or lacks the lines that would have shown it:\n%s", l)
	}
	_ = st.CloseRequest()
	_ = st.CloseResponse()
}

// A task naming a secret that does not exist is refused at submit, saying
// which and how to set it, and nothing is stored; one whose secret is deleted
// before it is assigned fails with a reason instead of running without it.
func TestTaskNamingAMissingSecret(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox",
		Secrets: []*podiumv1.SecretRef{{Name: "nope"}}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no secret named nope") || !strings.Contains(err.Error(), "podium secret set") {
		t.Fatalf("submit naming a missing secret: %v, want FailedPrecondition naming it and podium secret set", err)
	}
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil || len(list.Msg.Tasks) != 0 {
		t.Fatalf("tasks after a refused submit: %v, %v; want none", list, err)
	}
	if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "short-lived", Value: []byte("value-123")})); err != nil {
		t.Fatal(err)
	}
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: "short-lived"}}})
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "short-lived"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "short-lived"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("deleting it again: %v, want NotFound", err)
	}
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	defer cancelStream(node)
	got := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	if !strings.Contains(got.Reason, "no secret named short-lived") {
		t.Fatalf("reason %q, want it to name the missing secret", got.Reason)
	}
	// A follower sees it end with that reason, as `podium run` would.
	ev, err := r.Tasks().Events(ctx, connect.NewRequest(&podiumv1.EventsRequest{Id: task, Follow: true}))
	if err != nil {
		t.Fatal(err)
	}
	var final *podiumv1.StatusChange
	for ev.Receive() {
		if s := ev.Msg().GetEvent().GetStatus(); s != nil {
			final = s
		}
	}
	if err := ev.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil || final.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(final.Reason, "no secret named short-lived") {
		t.Fatalf("the task's log ends with %v, want failed naming the missing secret", final)
	}
}

// The admin API refuses bad names and values with what to do, and a
// coordinator without a key refuses to set secrets, naming the setting.
func TestSetSecretRefusals(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t) // no key
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		req  *podiumv1.SetSecretRequest
		code connect.Code
		want string
	}{
		{&podiumv1.SetSecretRequest{Name: "Bad_Name", Value: []byte("x")}, connect.CodeInvalidArgument, "lower-case"},
		{&podiumv1.SetSecretRequest{Name: "big", Value: bytes.Repeat([]byte("x"), 64<<10+1)}, connect.CodeInvalidArgument, "more than 65536"},
		{&podiumv1.SetSecretRequest{Name: "ok", Value: []byte("x")}, connect.CodeFailedPrecondition, "PODIUM_SECRETS_KEY_FILE"},
	} {
		_, err := r.Admin().SetSecret(ctx, connect.NewRequest(c.req))
		if connect.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetSecret(%q, %d bytes) = %v, want %v saying %q", c.req.Name, len(c.req.Value), err, c.code, c.want)
		}
	}
}

// A node that comes back holding a task whose secret was deleted meanwhile
// keeps the task (it already has the value) and is sent every value the
// attempt was assigned, the deleted one too: the attempt pins it, so it is
// kept until the attempt ends, and the restarted agent goes on redacting it.
// A value of exactly 64 KiB goes through the API.
func TestAdoptAfterASecretWasDeleted(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := bytes.Repeat([]byte("k"), 64<<10)
	for name, v := range map[string][]byte{"kept": big, "deleted": []byte("value-deleted")} {
		if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: name, Value: v})); err != nil {
			t.Fatalf("SetSecret %s (%d bytes): %v", name, len(v), err)
		}
	}
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	task := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox", Secrets: []*podiumv1.SecretRef{{Name: "kept"}, {Name: "deleted", File: "d"}}})
	a := assignOf(t, node)
	if len(a.Secrets) != 2 || !bytes.Equal(a.Secrets[0].Value, big) || a.Secrets[0].Env != "KEPT" || string(a.Secrets[1].Value) != "value-deleted" {
		t.Fatalf("Assign secrets %v, want kept (64 KiB, as KEPT) and deleted", a.Secrets)
	}
	node.send(t, status(task, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_RUNNING)
	cancelStream(node)
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "deleted"})); err != nil {
		t.Fatal(err)
	}
	coordtest.Eventually(t, 10*time.Second, "the session to end", func() bool {
		ns, _ := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		return ns != nil && ns.Msg.Nodes[0].Replica == ""
	})
	st := r.NodeClient().Stream(ctx)
	defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Running: []*podiumv1.RunningTask{{TaskId: task, Attempt: a.Attempt, LastSeq: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil {
		t.Fatalf("waiting for the HelloAck: %v", err)
	}
	adopt := m.GetHelloAck().GetAdopt()
	if len(adopt) != 1 || !adopt[0].Keep || len(adopt[0].Secrets) != 2 || adopt[0].Secrets[0].Name != "kept" || !bytes.Equal(adopt[0].Secrets[0].Value, big) ||
		adopt[0].Secrets[1].Name != "deleted" || string(adopt[0].Secrets[1].Value) != "value-deleted" || adopt[0].Secrets[1].File != "d" {
		t.Fatalf("adopt of %s: keep %v with %d secret(s), want it kept with both values it was assigned, the deleted one too", task, len(adopt) == 1 && adopt[0].Keep, len(adopt[0].GetSecrets()))
	}
	if l := logs.String(); strings.Contains(l, "no longer exist") || strings.Contains(l, "value-deleted") {
		t.Fatalf("the log warns of a secret that could not be resent, or holds a value:\n%s", l)
	}
	// A task submitted now that names it is refused, as before.
	_, err = r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox",
		Secrets: []*podiumv1.SecretRef{{Name: "deleted"}}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no secret named deleted") {
		t.Fatalf("submit naming the deleted secret: %v, want FailedPrecondition naming it", err)
	}
}

// Secrets are an admin's: a member or a viewer can neither set nor delete
// them (each refusal names the admin role), a viewer cannot list them and a
// member lists only those granted to them, and what an admin does
// with them is in the audit log, with the name as its target and never the
// value anywhere in it.
func TestSecretsAreAdminOnlyAndAudited(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx := context.Background()
	const value = "s3cr3t-value-for-audit"
	if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "db-password", Value: []byte(value)})); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"member", "viewer"} {
		p := as(r, addUser(t, r, "p-"+role, role))
		_, err := p.admin.SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "db-password", Value: []byte("other")}))
		wantDenied(t, role+" setting a secret", err, "admin")
		// A member lists the secrets they may use (none here: see
		// secretscope_test.go); a viewer, none.
		ls, err := p.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
		if role == "member" && (err != nil || len(ls.Msg.Secrets) != 0) {
			t.Fatalf("member listing secrets granted to nobody: %v, %v; want none", ls, err)
		} else if role == "viewer" {
			wantDenied(t, role+" listing secrets", err, "member")
		}
		_, err = p.admin.DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "db-password"}))
		wantDenied(t, role+" deleting a secret", err, "admin")
	}
	if _, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{})); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "db-password"})); err != nil {
		t.Fatal(err)
	}
	res, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Msg.Entries {
		if strings.Contains(e.String(), value) {
			t.Fatalf("the audit log holds a secret's value: %v", e)
		}
		if strings.Contains(e.Action, "Secret") {
			got = append(got, e.Who+" "+e.Action+" "+e.Target+" "+e.Result)
		}
	}
	want := []string{ // newest first; a list is a read, which is not audited
		"token AdminService.DeleteSecret db-password ok",
		"p-viewer AdminService.DeleteSecret db-password permission_denied",
		"p-viewer AdminService.SetSecret db-password permission_denied",
		"p-member AdminService.DeleteSecret db-password permission_denied",
		"p-member AdminService.SetSecret db-password permission_denied",
		"token AdminService.SetSecret db-password ok",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit rows of secret calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
