package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/cron"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// Issue 28, hole 1: a secret has a scope. These tests reproduce a member's
// attempts to use a secret nobody granted them, and check what they see
// after an admin grants it.

// deployKey is the admin's secret the member is after, and its value.
const (
	deployKey   = "prod-deploy-key"
	deployValue = "d3ploy-k3y-value-nobody-else-sees"
)

func setSecret(t *testing.T, ctx context.Context, r *coordtest.Replica, name, value string, allow ...string) {
	t.Helper()
	if _, err := r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: name, Value: []byte(value), Allow: allow})); err != nil {
		t.Fatalf("set secret %s: %v", name, err)
	}
}

func grant(t *testing.T, ctx context.Context, r *coordtest.Replica, name string, principals ...string) *podiumv1.Secret {
	t.Helper()
	res, err := r.Admin().GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: name, Principals: principals}))
	if err != nil {
		t.Fatalf("grant %s to %v: %v", name, principals, err)
	}
	if res.Msg.Secret.GetVersion() < 1 {
		t.Fatalf("grant %s answered %v: the secret as it is, version included, is what an admin reads back", name, res.Msg.Secret)
	}
	return res.Msg.Secret
}

func revoke(t *testing.T, ctx context.Context, r *coordtest.Replica, name string, principals ...string) *podiumv1.Secret {
	t.Helper()
	res, err := r.Admin().RevokeSecret(ctx, connect.NewRequest(&podiumv1.RevokeSecretRequest{Name: name, Principals: principals}))
	if err != nil {
		t.Fatalf("revoke %s from %v: %v", name, principals, err)
	}
	return res.Msg.Secret
}

func secretSpec(names ...string) *podiumv1.TaskSpec {
	spec := &podiumv1.TaskSpec{Image: "busybox"}
	for i, n := range names {
		spec.Secrets = append(spec.Secrets, &podiumv1.SecretRef{Name: n, Env: fmt.Sprintf("KEY%d", i)})
	}
	return spec
}

// auditRows lists the audit log, oldest first, as the admin reads it.
func auditRows(t *testing.T, ctx context.Context, r *coordtest.Replica) []*podiumv1.AuditEntry {
	t.Helper()
	res, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{Limit: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	out := res.Msg.Entries
	slices.Reverse(out)
	return out
}

// wantAudit fails unless the audit log has a row of action by who with
// target and result.
func wantAudit(t *testing.T, ctx context.Context, r *coordtest.Replica, action, who, target, result string) {
	t.Helper()
	rows := auditRows(t, ctx, r)
	for _, a := range rows {
		if a.Action == action && a.Who == who && a.Target == target && a.Result == result {
			return
		}
	}
	var b strings.Builder
	for _, a := range rows {
		fmt.Fprintf(&b, "  %s %s %s %q %s\n", a.Who, a.Role, a.Action, a.Target, a.Result)
	}
	t.Fatalf("no audit row %s by %s on %q with result %s; the log:\n%s", action, who, target, result, b.String())
}

// runToEnd has the simulated node take its next assignment to success and
// returns it.
func runToEnd(t *testing.T, n *simNode) *podiumv1.Assign {
	t.Helper()
	a := assignOf(t, n)
	zero := int32(0)
	runTo(t, n, a.TaskId, a.Attempt, &zero)
	return a
}

func secretNames(ss []*podiumv1.Secret) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// A member who names the admin's secret is refused, saying which secret and
// how to get it, and nothing is stored; a secret that does not exist reads
// the same to them. The refusal is audited. After the admin grants it to
// the member by name, to a group the member is in, or to every member, the
// same submit is accepted and the task's assignment carries the value (and
// that use is audited). `secret ls` shows a member only what they may use;
// an admin, every secret with its grants. The value is in no task event
// and no line of the coordinator's log.
func TestMemberUsesOnlyGrantedSecrets(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setSecret(t, ctx, r, deployKey, deployValue)
	setSecret(t, ctx, r, "ci-token", "ci-token-value")
	alice, bob := as(r, addUser(t, r, "alice", "member")), as(r, addUser(t, r, "bob", "member"))
	vic := as(r, addUser(t, r, "vic", "viewer"))

	// The hole: alice read the name off the admin's task and asks for it.
	_, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	wantDenied(t, "alice naming the admin's secret", err, deployKey, "alice may not use", "ask an admin: `podium secret grant "+deployKey+" alice`")
	_, missing := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec("no-such-key")}))
	wantDenied(t, "alice naming a secret that does not exist", missing, "no-such-key", "alice may not use", "podium secret grant no-such-key alice")
	if n := taskCount(t, ctx, r); n != 0 {
		t.Fatalf("%d tasks stored after refused submits, want none", n)
	}
	wantAudit(t, ctx, r, "TaskService.Submit", "alice", "secret "+deployKey, "permission_denied")

	// A member lists only what they may use: nothing yet. A viewer lists
	// nothing at all.
	ls, err := alice.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 0 {
		t.Fatalf("alice's secret ls = %v, %v; want none", ls, err)
	}
	_, err = vic.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	wantDenied(t, "vic's secret ls", err, "member")

	// Granted to alice by name.
	if s := grant(t, ctx, r, deployKey, "alice"); !slices.Equal(s.Allow, []string{"alice"}) {
		t.Fatalf("after grant alice: allow %v", s.Allow)
	}
	wantAudit(t, ctx, r, "AdminService.GrantSecret", "token", "secret "+deployKey, "ok")
	ls, err = alice.admin.ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || !slices.Equal(secretNames(ls.Msg.Secrets), []string{deployKey}) || len(ls.Msg.Secrets[0].Allow) != 0 {
		t.Fatalf("alice's secret ls = %v, %v; want %s alone, without its grants", ls, err, deployKey)
	}
	all, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || !slices.Equal(secretNames(all.Msg.Secrets), []string{"ci-token", deployKey}) ||
		len(all.Msg.Secrets[0].Allow) != 0 || !slices.Equal(all.Msg.Secrets[1].Allow, []string{"alice"}) {
		t.Fatalf("the admin's secret ls = %v, %v; want both, %s allowing alice", all, err, deployKey)
	}

	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	defer cancelStream(node)
	res, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	if err != nil {
		t.Fatalf("alice's submit once granted: %v", err)
	}
	a := runToEnd(t, node)
	if a.TaskId != res.Msg.Task.Id || len(a.Secrets) != 1 || string(a.Secrets[0].Value) != deployValue {
		t.Fatalf("assignment %s carries %v, want alice's task with %s's value", a.TaskId, a.Secrets, deployKey)
	}
	wantAudit(t, ctx, r, "secret.use", "alice", a.TaskId+" secret "+deployKey, "ok")
	// Granted to alice, not to bob; nor the other secret to alice.
	_, err = bob.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	wantDenied(t, "bob naming the secret granted to alice", err, "bob may not use", "podium secret grant "+deployKey+" bob")
	_, err = alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey, "ci-token")}))
	wantDenied(t, "alice naming a granted and an ungranted secret", err, "secret ci-token", "podium secret grant ci-token alice")

	// Granted to a group alice is in: alice may, bob (not in it) may not.
	revoke(t, ctx, r, deployKey, "alice")
	wantAudit(t, ctx, r, "AdminService.RevokeSecret", "token", "secret "+deployKey, "ok")
	if _, err := r.Store().SetUserGroups(ctx, "alice", []string{"ml"}); err != nil {
		t.Fatal(err)
	}
	grant(t, ctx, r, deployKey, "group:ml")
	res, err = alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	if err != nil {
		t.Fatalf("alice's submit with the secret granted to group:ml: %v", err)
	}
	if a := runToEnd(t, node); a.TaskId != res.Msg.Task.Id || string(a.Secrets[0].Value) != deployValue {
		t.Fatalf("assignment %s carries %v, want alice's task with the value", a.TaskId, a.Secrets)
	}
	_, err = bob.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	wantDenied(t, "bob, not in ml", err, "bob may not use")

	// Granted to every member: bob may too.
	revoke(t, ctx, r, deployKey, "group:ml")
	grant(t, ctx, r, deployKey, "role:member")
	res, err = bob.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	if err != nil {
		t.Fatalf("bob's submit with the secret granted to role:member: %v", err)
	}
	a = runToEnd(t, node)
	if a.TaskId != res.Msg.Task.Id || string(a.Secrets[0].Value) != deployValue {
		t.Fatalf("assignment %s carries %v, want bob's task with the value", a.TaskId, a.Secrets)
	}
	wantAudit(t, ctx, r, "secret.use", "bob", a.TaskId+" secret "+deployKey, "ok")
	waitState(t, ctx, r, a.TaskId, podiumv1.TaskState_TASK_STATE_SUCCEEDED)

	// The value is nowhere a person reads: not in the task's events, not
	// in the coordinator's log (at debug, which logs every assignment).
	for _, ev := range readLog(t, ctx, r, a.TaskId) {
		if js, _ := protojson.Marshal(ev); strings.Contains(string(js), deployValue) {
			t.Fatalf("task %s's events hold the value: %s", a.TaskId, js)
		}
	}
	if l := logs.String(); strings.Contains(l, deployValue) || !strings.Contains(l, "secret granted") {
		t.Fatalf("the coordinator's log holds the value, or lacks the grants:\n%s", l)
	}
}

// A grant revoked while the task waits fails the task when its assignment
// would be built: the reason names the secret and how to get it, the node
// is never sent the value (its next assignment is the task after), and the
// refused use is audited. Nor may the owner rerun it.
func TestRevokedWhileQueuedFailsAtAssignment(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var logs syncBuffer
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setSecret(t, ctx, r, deployKey, deployValue, "alice")
	alice := as(r, addUser(t, r, "alice", "member"))
	res, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec(deployKey)}))
	if err != nil {
		t.Fatalf("alice's submit with the secret granted at set: %v", err)
	}
	task := res.Msg.Task.Id
	revoke(t, ctx, r, deployKey, "alice")

	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	defer cancelStream(node)
	got := waitState(t, ctx, r, task, podiumv1.TaskState_TASK_STATE_FAILED)
	for _, s := range []string{"alice may not use secret " + deployKey, "podium secret grant " + deployKey + " alice", "checked again when the task is assigned"} {
		if !strings.Contains(got.Reason, s) {
			t.Errorf("reason %q does not say %q", got.Reason, s)
		}
	}
	wantAudit(t, ctx, r, "secret.use", "alice", task+" secret "+deployKey, "permission_denied")
	// A rerun is a submit: alice may not rerun it either, and nothing is
	// stored; the admin may (the rerun is then the admin's task).
	_, err = alice.tasks.Rerun(ctx, connect.NewRequest(&podiumv1.RerunRequest{Id: task}))
	wantDenied(t, "alice's rerun after the revoke", err, "alice may not use secret "+deployKey, "podium secret grant "+deployKey+" alice")
	if n := taskCount(t, ctx, r); n != 1 {
		t.Fatalf("%d tasks after the refused rerun, want the one", n)
	}
	wantAudit(t, ctx, r, "TaskService.Rerun", "alice", task+" secret "+deployKey, "permission_denied")
	// The node's first assignment is the next task: the failed one was
	// never sent.
	next := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox"})
	if a := assignOf(t, node); a.TaskId != next || len(a.Secrets) != 0 {
		t.Fatalf("the node's first assignment is %s with %d secrets, want %s (the revoked task never sent)", a.TaskId, len(a.Secrets), next)
	}
	for _, ev := range readLog(t, ctx, r, task) {
		if js, _ := protojson.Marshal(ev); strings.Contains(string(js), deployValue) {
			t.Fatalf("task %s's events hold the value: %s", task, js)
		}
	}
	if strings.Contains(logs.String(), deployValue) {
		t.Fatal("the coordinator's log holds the value")
	}
}

// A notify entry's signing secret is a use of it: a member naming one they
// were not granted is refused at submit, as in secrets; one granted at
// submit and revoked before the event is sent is neither signed nor sent,
// and the refusal is audited.
func TestNotifySigningSecretIsScoped(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t), Notify: hooksConfig(true)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setSecret(t, ctx, r, "hook-key", "hook-key-value")
	alice := as(r, addUser(t, r, "alice", "member"))
	rc := newReceiver(t, 0)
	spec := &podiumv1.TaskSpec{Image: "busybox", Notify: []*podiumv1.Notify{{Url: rc.url, Secret: "hook-key"}}}

	_, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: spec}))
	wantDenied(t, "alice's notify signed with the admin's secret", err, "secret hook-key", "podium secret grant hook-key alice")
	if n := taskCount(t, ctx, r); n != 0 {
		t.Fatalf("%d tasks stored after a refused submit, want none", n)
	}
	wantAudit(t, ctx, r, "TaskService.Submit", "alice", "secret hook-key", "permission_denied")

	grant(t, ctx, r, "hook-key", "alice")
	// Granted, the end of alice's task is signed with the secret: a use
	// of it like any other, so it is audited (the value never is).
	signed := submitSpec(t, ctx, alice.tasks, spec)
	if _, err := alice.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: signed})); err != nil {
		t.Fatal(err)
	}
	coordtest.Eventually(t, 20*time.Second, "the signed notify of "+signed+" to reach the receiver", func() bool { return len(rc.got()) == 1 })
	wantAudit(t, ctx, r, "secret.use", "alice", signed+" notify secret hook-key", "ok")

	task := submitSpec(t, ctx, alice.tasks, spec)
	revoke(t, ctx, r, "hook-key", "alice")
	if _, err := alice.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: task})); err != nil {
		t.Fatal(err)
	}
	coordtest.Eventually(t, 20*time.Second, "the refused notify row to leave the outbox", func() bool { return len(outbox(t, r)) == 0 })
	if n := len(rc.got()); n != 1 {
		t.Fatalf("the receiver got %d POSTs, want only the one signed while alice was granted the secret", n)
	}
	wantAudit(t, ctx, r, "secret.use", "alice", task+" notify secret hook-key", "permission_denied")
}

// A schedule fires as its owner: a member cannot make one naming a secret
// they were not granted, and a tick after the grant was revoked creates no
// task, its note naming the secret and how to get it (audited). Run-now by
// an admin runs the owner's task, so it is refused the same way.
func TestScheduleTickNeedsItsOwnersGrant(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	clk := newClock(t0)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t),
		Schedules: cron.Config{Every: 20 * time.Millisecond, Now: clk.now}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coordtest.Eventually(t, 10*time.Second, "the replica to lead", r.Leading)
	setSecret(t, ctx, r, deployKey, deployValue)
	aliceSched := podiumv1connect.NewScheduleServiceClient(coordtest.HTTPClient(), r.URL(),
		connect.WithInterceptors(tok(addUser(t, r, "alice", "member"))))
	create := &podiumv1.ScheduleServiceCreateRequest{Name: "nightly-deploy", Cron: "* * * * *", Spec: secretSpec(deployKey)}

	_, err := aliceSched.Create(ctx, connect.NewRequest(create))
	wantDenied(t, "alice's schedule naming the admin's secret", err, "alice may not use secret "+deployKey, "podium secret grant "+deployKey+" alice")

	grant(t, ctx, r, deployKey, "alice")
	if _, err := aliceSched.Create(ctx, connect.NewRequest(create)); err != nil {
		t.Fatalf("alice's schedule once granted: %v", err)
	}
	revoke(t, ctx, r, deployKey, "alice")
	clk.set(t0.Add(31 * time.Second))
	ticks := waitTicks(t, ctx, aliceSched, "nightly-deploy", 1)
	if ticks[0].TaskId != "" || !strings.Contains(ticks[0].Note, "alice may not use secret "+deployKey) ||
		!strings.Contains(ticks[0].Note, "podium secret grant "+deployKey+" alice") {
		t.Fatalf("tick %v, want no task and a note naming the secret and the grant", ticks[0])
	}
	if tasks := listTasks(t, ctx, r); len(tasks) != 0 {
		t.Fatalf("the refused tick created tasks %v", tasks)
	}
	wantAudit(t, ctx, r, "secret.use", "alice", "schedule nightly-deploy secret "+deployKey, "permission_denied")

	_, err = r.Schedules().RunNow(ctx, connect.NewRequest(&podiumv1.ScheduleServiceRunNowRequest{Name: "nightly-deploy"}))
	wantDenied(t, "the admin's run-now of alice's schedule", err, "alice may not use secret "+deployKey)
	if tasks := listTasks(t, ctx, r); len(tasks) != 0 {
		t.Fatalf("the refused run-now created tasks %v", tasks)
	}
	// Granted again, the next tick creates the task.
	grant(t, ctx, r, deployKey, "alice")
	clk.set(t0.Add(91 * time.Second))
	ticks = waitTicks(t, ctx, aliceSched, "nightly-deploy", 2)
	if ticks[0].TaskId == "" {
		t.Fatalf("tick %v after the grant, want a task", ticks[0])
	}
}

// Grants and revokes refuse what is not a principal, too many at once, a
// secret that does not exist and a revoke of what is not granted, each
// saying what to do, with nothing changed; a member may not grant. A secret
// set with --allow is granted in the same call; deleting it deletes its
// grants.
func TestSecretGrantRefusals(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setSecret(t, ctx, r, "db-password", "pw-value", "alice", "group:ml", "alice")
	alice := as(r, addUser(t, r, "alice", "member"))

	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("user%d", i)
	}
	for _, c := range []struct {
		name       string
		principals []string
		says       string
	}{
		{"db-password", nil, "name at least one"},
		{"db-password", []string{"role:viewer"}, "viewers cannot submit"},
		{"db-password", []string{"role:admin"}, "admins may use every secret already"},
		{"db-password", []string{"role:owner"}, "only role a secret is granted to is role:member"},
		{"db-password", []string{"group:"}, "not a group name"},
		{"db-password", []string{"group:a=b"}, "not a group name"},
		{"db-password", []string{"group:" + strings.Repeat("g", 65)}, "at most 64 bytes"},
		{"db-password", []string{"Alice Smith"}, "not a principal"},
		{"db-password", []string{strings.Repeat("a", 200) + "@example.com"}, "not a principal"},
		{"db-password", many, "65 is more than 64"},
		{"Bad_Name", []string{"alice"}, "lower-case"},
	} {
		_, err := r.Admin().GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: c.name, Principals: c.principals}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), c.says) {
			t.Errorf("grant %s to %.60q: %v, want InvalidArgument saying %q", c.name, c.principals, err, c.says)
		}
	}
	_, err := r.Admin().GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: "nope", Principals: []string{"alice"}}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "podium secret set nope") {
		t.Errorf("grant of a missing secret: %v, want NotFound saying how to set it", err)
	}
	_, err = r.Admin().RevokeSecret(ctx, connect.NewRequest(&podiumv1.RevokeSecretRequest{Name: "db-password", Principals: []string{"alice", "bob"}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "not granted to bob") ||
		!strings.Contains(err.Error(), "granted to alice, group:ml") {
		t.Errorf("revoke of a principal not granted: %v, want FailedPrecondition naming it and the grants", err)
	}
	_, err = alice.admin.GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: "db-password", Principals: []string{"alice"}}))
	wantDenied(t, "alice granting herself", err, "admin")
	_, err = alice.admin.RevokeSecret(ctx, connect.NewRequest(&podiumv1.RevokeSecretRequest{Name: "db-password", Principals: []string{"group:ml"}}))
	wantDenied(t, "alice revoking", err, "admin")
	_, err = r.Admin().SetSecret(ctx, connect.NewRequest(&podiumv1.SetSecretRequest{Name: "other", Value: []byte("v"), Allow: []string{"role:viewer"}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "allow: role:viewer") {
		t.Errorf("set with a bad allow: %v, want InvalidArgument", err)
	}
	// MaxSecretGrants in all: four calls of 64 fill it, one more is refused.
	for i := range 4 {
		batch := make([]string, 64)
		for j := range batch {
			batch[j] = fmt.Sprintf("u%d-%d", i, j)
		}
		if i == 3 {
			batch = batch[:62] // alice and group:ml are granted already
		}
		grant(t, ctx, r, "db-password", batch...)
	}
	_, err = r.Admin().GrantSecret(ctx, connect.NewRequest(&podiumv1.GrantSecretRequest{Name: "db-password", Principals: []string{"one-more"}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("the 257th grant: %v, want FailedPrecondition naming the bound", err)
	}

	ls, err := r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 1 || len(ls.Msg.Secrets[0].Allow) != 256 || slices.Contains(ls.Msg.Secrets[0].Allow, "one-more") {
		t.Fatalf("secret ls = %v, %v; want db-password alone with 256 grants", ls, err)
	}
	if _, err := r.Admin().DeleteSecret(ctx, connect.NewRequest(&podiumv1.DeleteSecretRequest{Name: "db-password"})); err != nil {
		t.Fatal(err)
	}
	setSecret(t, ctx, r, "db-password", "new")
	ls, err = r.Admin().ListSecrets(ctx, connect.NewRequest(&podiumv1.ListSecretsRequest{}))
	if err != nil || len(ls.Msg.Secrets) != 1 || len(ls.Msg.Secrets[0].Allow) != 0 {
		t.Fatalf("secret ls after delete and set again = %v, %v; want no grants left", ls, err)
	}
	_, err = alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: secretSpec("db-password")}))
	wantDenied(t, "alice after the secret was deleted and set again", err, "alice may not use secret db-password")
}
