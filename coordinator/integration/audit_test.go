package integration_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Every call that changes something is a row of the audit log: who, the
// role they had, the transport, the call, its target and its result;
// refused and failed calls too. Reads are not. The admin reads it with
// ListAudit, narrowed by user; a member may not.
func TestAuditLogRecordsChanges(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	aliceTok := addUser(t, r, "alice", "member")
	alice, vic := as(r, aliceTok), as(r, addUser(t, r, "vic", "viewer"))
	sub, err := alice.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.Task.Id
	if _, err := alice.tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	_, err = vic.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id}))
	wantDenied(t, "a viewer's cancel", err)
	if _, err := alice.tasks.Cancel(ctx, connect.NewRequest(&podiumv1.CancelRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	_, err = alice.tasks.Send(ctx, connect.NewRequest(&podiumv1.SendRequest{Id: id, Text: "hi"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("send to a cancelled task: %v, want FailedPrecondition", err)
	}
	if _, err := r.Admin().SetUserRole(ctx, connect.NewRequest(&podiumv1.SetUserRoleRequest{Name: "vic", Role: "member"})); err != nil {
		t.Fatal(err)
	}

	res, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ who, role, action, target, result string }
	var got []row
	for _, e := range res.Msg.Entries {
		if e.Transport != "local" || e.At == nil {
			t.Errorf("entry %v: want transport local and a time", e)
		}
		got = append(got, row{e.Who, e.Role, e.Action, e.Target, e.Result})
	}
	want := []row{ // newest first
		{"token", "admin", "AdminService.SetUserRole", "vic", "ok"},
		{"alice", "member", "TaskService.Send", id, "failed_precondition"},
		{"alice", "member", "TaskService.Cancel", id, "ok"},
		{"vic", "viewer", "TaskService.Cancel", id, "permission_denied"},
		{"alice", "member", "TaskService.Submit", id, "ok"},
		{"token", "admin", "AdminService.AddUser", "vic", "ok"},
		{"token", "admin", "AdminService.AddUser", "alice", "ok"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit log:\n%v\nwant:\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %v, want %v", i, got[i], want[i])
		}
	}
	mine, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{User: "vic"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(mine.Msg.Entries) != 1 || mine.Msg.Entries[0].Action != "TaskService.Cancel" {
		t.Errorf("vic's entries: %v, want his one refused cancel", mine.Msg.Entries)
	}
	_, err = alice.admin.ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	wantDenied(t, "a member reading the audit log", err, "needs the admin role")
	// Reads, refused ones included, are not changes: the log is as it was.
	again, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Msg.Entries) != len(want) {
		t.Errorf("after reads the audit log has %d entries, want %d", len(again.Msg.Entries), len(want))
	}
}

// The audit row is written in the change's transaction: when it cannot be
// written, the change is not made either.
func TestAuditRowAndChangeCommitTogether(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Postgres refuses every audit row of AddUser from now on.
	if _, err := conn.Exec(ctx, `alter table podium.audit_log add constraint no_add_user check (action <> 'AdminService.AddUser')`); err != nil {
		t.Fatal(err)
	}
	_, err = r.Admin().AddUser(ctx, connect.NewRequest(&podiumv1.AddUserRequest{Name: "alice", Role: "admin"}))
	if err == nil {
		t.Fatal("AddUser succeeded without its audit row")
	}
	var n int
	if err := conn.QueryRow(ctx, `select count(*) from podium.users`).Scan(&n); err != nil || n != 0 {
		t.Errorf("users after an AddUser whose audit row failed: %d (%v), want none", n, err)
	}
	// Submits are audited in their own statement; the same holds.
	if _, err := conn.Exec(ctx, `alter table podium.audit_log add constraint no_submit check (action <> 'TaskService.Submit')`); err != nil {
		t.Fatal(err)
	}
	_, err = r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err == nil {
		t.Fatal("Submit succeeded without its audit row")
	}
	if err := conn.QueryRow(ctx, `select count(*) from podium.tasks`).Scan(&n); err != nil || n != 0 {
		t.Errorf("tasks after a submit whose audit row failed: %d (%v), want none", n, err)
	}
}

// podium.audit_recent is the audit log as an admin reads it in psql: the
// same rows as ListAudit, newest first, with the call's service dropped.
func TestAuditRecentView(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx := context.Background()
	vic := as(r, addUser(t, r, "vic", "viewer"))
	_, err := vic.tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	wantDenied(t, "a viewer's submit", err)
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "select who, role, transport, action, target, result from podium.audit_recent")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var who, role, transport, action, target, result string
		err := row.Scan(&who, &role, &transport, &action, &target, &result)
		return who + " " + role + " " + transport + " " + action + " " + target + " " + result, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vic viewer local Submit  permission_denied",
		"token admin local AddUser vic ok",
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("podium.audit_recent:\n%v\nwant:\n%v", got, want)
	}
}
