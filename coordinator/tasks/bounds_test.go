package tasks_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A coordinator's --max-member-priority other than the default: a member
// at the cap is accepted, one above refused naming the cap; an admin is
// not bounded, up to taskspec's own (any 32-bit) priority; a member's group
// is checked against their user row's groups, and one without a row (a
// tailnet person known by a grant) has none.
func TestBoundsCheck(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	h := sha256.Sum256([]byte("alice's token"))
	if _, err := st.AddUser(ctx, "alice", "member", h[:], "token", "ml"); err != nil {
		t.Fatal(err)
	}
	b := tasks.Bounds{MaxMemberPriority: 5}
	spec := func(priority int32, group string) *podiumv1.TaskSpec {
		return &podiumv1.TaskSpec{Image: "busybox", Priority: priority, Group: group}
	}
	for _, c := range []struct {
		who   string
		role  access.Role
		spec  *podiumv1.TaskSpec
		wants string // "" accepted
	}{
		{"alice", access.Member, spec(5, ""), ""},
		{"alice", access.Member, spec(6, ""), "spec.priority: 6 is above 5"},
		{"alice", access.Member, spec(-1<<31, "ml"), ""},
		{"alice", access.Member, spec(0, "infra"), "alice's groups are ml; "},
		{"admin@example.com", access.Admin, spec(1<<31-1, "infra"), ""},
		{"bob@example.com", access.Member, spec(0, "ml"), "bob@example.com belongs to no group"},
		{"bob@example.com", access.Member, spec(0, ""), ""},
	} {
		err := b.Check(ctx, st, c.who, c.role, c.spec)
		switch {
		case c.wants == "" && err != nil:
			t.Errorf("%s (%s) priority %d group %q: %v, want accepted", c.who, c.role, c.spec.Priority, c.spec.Group, err)
		case c.wants != "" && (connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), c.wants)):
			t.Errorf("%s (%s) priority %d group %q: %v, want PermissionDenied saying %q", c.who, c.role, c.spec.Priority, c.spec.Group, err, c.wants)
		}
	}
}
