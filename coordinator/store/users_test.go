package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/store"
)

// A user's groups are stored sorted and without duplicates, read back with
// the user, replaced whole, and bounded by the column itself; a name with
// no user row has none (ok false) rather than an error.
func TestUserGroupsAreReplacedWholeAndBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openStore(t)
	h := sha256.Sum256([]byte("alice's token"))
	if u, err := st.AddUser(ctx, "alice", "member", h[:], "token"); err != nil || len(u.Groups) != 0 {
		t.Fatalf("add alice: %+v, %v; want no groups", u, err)
	}
	u, err := st.SetUserGroups(ctx, "alice", []string{"ml", "infra", "ml"})
	if err != nil || !slices.Equal(u.Groups, []string{"infra", "ml"}) {
		t.Fatalf("set alice's groups: %+v, %v; want [infra ml]", u, err)
	}
	if g, ok, err := st.UserGroups(ctx, "alice"); err != nil || !ok || !slices.Equal(g, []string{"infra", "ml"}) {
		t.Fatalf("alice's groups read back: %v %v %v", g, ok, err)
	}
	if u, err := st.SetUserGroups(ctx, "alice", []string{"web"}); err != nil || !slices.Equal(u.Groups, []string{"web"}) {
		t.Fatalf("replace alice's groups: %+v, %v; want [web]", u, err)
	}
	if g, ok, err := st.UserGroups(ctx, "nobody"); err != nil || ok || g != nil {
		t.Fatalf("groups of a name with no user: %v %v %v; want none, ok false", g, ok, err)
	}
	if _, err := st.SetUserGroups(ctx, "nobody", []string{"x"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("set the groups of nobody: %v; want ErrNotFound", err)
	}
	many := make([]string, store.MaxUserGroups+1)
	for i := range many {
		many[i] = "g" + strings.Repeat("x", i)
	}
	if _, err := st.SetUserGroups(ctx, "alice", many); err == nil {
		t.Fatalf("%d groups were stored; the column allows %d", len(many), store.MaxUserGroups)
	}
	if g, _, _ := st.UserGroups(ctx, "alice"); !slices.Equal(g, []string{"web"}) {
		t.Fatalf("a refused change left alice with %v; want [web]", g)
	}
}
