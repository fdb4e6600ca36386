package integration_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// An admin sets a person's fair-share weight; user ls shows it (1 for
// everyone else). A weight out of 1..1000 is refused naming the field and
// the range, and stores nothing; an unknown person is refused with how to
// add them; a member may not set weights.
func TestSetUserWeight(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	memberToken := addUser(t, r, "alice", "member")
	addUser(t, r, "bob", "member")

	res, err := r.Admin().SetUserWeight(ctx, connect.NewRequest(&podiumv1.SetUserWeightRequest{Name: "bob", Weight: 3}))
	if err != nil || res.Msg.GetUser().GetWeight() != 3 {
		t.Fatalf("set bob's weight to 3: %v, %v", res, err)
	}
	for _, w := range []int32{0, -1, 1001} {
		_, err := r.Admin().SetUserWeight(ctx, connect.NewRequest(&podiumv1.SetUserWeightRequest{Name: "bob", Weight: w}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "weight") || !strings.Contains(err.Error(), "1 (the default) to 1000") {
			t.Errorf("weight %d: %v, want InvalidArgument naming weight and its range", w, err)
		}
	}
	_, err = r.Admin().SetUserWeight(ctx, connect.NewRequest(&podiumv1.SetUserWeightRequest{Name: "carol", Weight: 2}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "podium user add carol") {
		t.Errorf("unknown user: %v, want NotFound saying how to add them", err)
	}
	_, err = as(r, memberToken).admin.SetUserWeight(ctx, connect.NewRequest(&podiumv1.SetUserWeightRequest{Name: "alice", Weight: 1000}))
	wantDenied(t, "a member setting weights", err, "admin")

	ls, err := r.Admin().ListUsers(ctx, connect.NewRequest(&podiumv1.ListUsersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, u := range ls.Msg.GetUsers() {
		got[u.GetName()] = u.GetWeight()
	}
	if got["alice"] != 1 || got["bob"] != 3 {
		t.Errorf("user ls weights %v, want alice 1 (the default) and bob 3 (the refused weights stored nothing)", got)
	}
}

// An admin sets a spec group's fair-share weight before it has any task;
// group ls shows it with who set it. A weight out of 1..1000 or a name no
// spec could carry is refused naming what is wrong, and stores nothing; a
// member may neither set nor list; the change is in the audit log, once, as
// ok. Weight 1 puts the group back to the default, off the list.
func TestSetGroupWeight(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	memberToken := addUser(t, r, "alice", "member")

	res, err := r.Admin().SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: "ml-sweeps", Weight: 3}))
	if err != nil || res.Msg.GetGroup().GetWeight() != 3 || res.Msg.GetGroup().GetSetBy() != "token" {
		t.Fatalf("set group ml-sweeps's weight to 3: %v, %v", res, err)
	}
	for _, w := range []int32{0, -1, 1001} {
		_, err := r.Admin().SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: "ml-sweeps", Weight: w}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "weight") || !strings.Contains(err.Error(), "1 (the default) to 1000") {
			t.Errorf("weight %d: %v, want InvalidArgument naming weight and its range", w, err)
		}
	}
	for _, name := range []string{"", "ml sweeps", strings.Repeat("g", 65)} {
		_, err := r.Admin().SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: name, Weight: 2}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "name") {
			t.Errorf("group name %q: %v, want InvalidArgument naming the name", name, err)
		}
	}
	_, err = as(r, memberToken).admin.SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: "ml-sweeps", Weight: 1000}))
	wantDenied(t, "a member setting a group's weight", err, "admin")
	_, err = as(r, memberToken).admin.ListGroups(ctx, connect.NewRequest(&podiumv1.ListGroupsRequest{}))
	wantDenied(t, "a member listing groups", err, "admin")

	ls, err := r.Admin().ListGroups(ctx, connect.NewRequest(&podiumv1.ListGroupsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if gs := ls.Msg.GetGroups(); len(gs) != 1 || gs[0].GetName() != "ml-sweeps" || gs[0].GetWeight() != 3 || gs[0].GetSetAt() == nil {
		t.Errorf("group ls: %v, want ml-sweeps alone with weight 3 (the refused weights stored nothing)", gs)
	}
	audit, err := r.Admin().ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "AdminService.SetGroupWeight" && e.GetTarget() == "ml-sweeps" {
			results[e.GetResult()]++
		}
	}
	if results["ok"] != 1 || results["permission_denied"] != 1 {
		t.Errorf("audit rows of SetGroupWeight on ml-sweeps by result: %v, want 1 ok and 1 permission_denied", results)
	}

	if _, err := r.Admin().SetGroupWeight(ctx, connect.NewRequest(&podiumv1.SetGroupWeightRequest{Name: "ml-sweeps", Weight: 1})); err != nil {
		t.Fatal(err)
	}
	ls, err = r.Admin().ListGroups(ctx, connect.NewRequest(&podiumv1.ListGroupsRequest{}))
	if err != nil || len(ls.Msg.GetGroups()) != 0 {
		t.Errorf("group ls after weight 1: %v, %v; want no group (1 is the default, and ml-sweeps has no tasks)", ls, err)
	}
}
