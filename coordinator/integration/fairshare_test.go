package integration_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/testenv/coordtest"
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
