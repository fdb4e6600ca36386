package secrets_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/tailnet"
)

// Principals are a user's name, group:NAME or role:member; anything else,
// and the roles a grant cannot mean, is refused saying what to write.
func TestCheckPrincipal(t *testing.T) {
	for _, ok := range []string{"alice", "alice@example.com", "group:ml", "group:team/ml-2.a_b", "role:member"} {
		if err := secrets.CheckPrincipal(ok); err != nil {
			t.Errorf("CheckPrincipal(%q) = %v, want nil", ok, err)
		}
	}
	for p, says := range map[string]string{
		"role:viewer":                      "viewers cannot submit",
		"role:admin":                       "admins may use every secret already",
		"role:Member":                      "only role a secret is granted to is role:member",
		"group:":                           "not a group name",
		"group:a b":                        "not a group name",
		"group:k=v":                        "not a group name",
		"group:" + strings.Repeat("g", 65): "at most 64 bytes",
		"":                                 "not a principal",
		"Alice":                            "not a principal",
		"user:alice":                       "not a principal",
		strings.Repeat("a", 129):           "not a principal",
	} {
		if err := secrets.CheckPrincipal(p); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("CheckPrincipal(%.40q) = %v, want it to say %q", p, err, says)
		}
	}
	if _, err := secrets.CheckPrincipals(nil); err == nil {
		t.Error("no principals accepted")
	}
	got, err := secrets.CheckPrincipals([]string{"alice", "group:ml", "alice"})
	if err != nil || len(got) != 2 {
		t.Errorf("CheckPrincipals with a duplicate = %v, %v; want alice and group:ml once each", got, err)
	}
	many := make([]string, secrets.MaxPrincipals+1)
	for i := range many {
		many[i] = "role:member"
	}
	if _, err := secrets.CheckPrincipals(many); err == nil || !strings.Contains(err.Error(), "more than 64") {
		t.Errorf("CheckPrincipals of %d = %v, want the bound named", len(many), err)
	}
}

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// Whom the check takes an owner for, from what the coordinator keeps: a
// user row's role and groups (a demotion counts at once), the bootstrap
// token without a row as an admin, anyone else without a row as a member
// with no groups. A member may use what is granted to their name, their
// groups or role:member; to them a missing secret reads as an ungranted
// one, to an admin as missing.
func TestAuthorizeByStanding(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	ctx := context.Background()
	v := secrets.NewVault(newKey(t), st)
	for name, allow := range map[string][]string{
		"by-name": {"alice"}, "by-group": {"group:ml"}, "by-role": {"role:member"}, "login": {"carol@example.com"}, "admins": nil,
	} {
		if _, err := v.Set(ctx, name, []byte("value-"+name), "token", allow...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AddUser(ctx, "alice", "member", hash("alice"), "token"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetUserGroups(ctx, "alice", []string{"ml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddUser(ctx, "root", "admin", hash("root"), "token"); err != nil {
		t.Fatal(err)
	}

	may := func(owner string, names ...string) error {
		t.Helper()
		_, err := v.Authorize(ctx, owner, names)
		return err
	}
	denied := func(what string, err error, says ...string) {
		t.Helper()
		var d *secrets.DeniedError
		if !errors.As(err, &d) {
			t.Fatalf("%s: %v, want a DeniedError", what, err)
		}
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", what, err, s)
			}
		}
	}
	if err := may("alice", "by-name", "by-group", "by-role"); err != nil {
		t.Errorf("alice, granted by name, group and role: %v", err)
	}
	denied("alice naming the admins' secret", may("alice", "by-role", "admins"), "alice may not use secret admins", "podium secret grant admins alice")
	denied("alice naming a missing secret", may("alice", "nope"), "alice may not use secret nope")
	// A tailnet person with no row: a member, reached by their login and
	// role:member, not by a group.
	if err := may("carol@example.com", "login", "by-role"); err != nil {
		t.Errorf("carol, granted by login and role: %v", err)
	}
	denied("carol, in no group", may("carol@example.com", "by-group"), "carol@example.com may not use secret by-group")
	// A local name with no row is a removed user (a login may have a role
	// from the tailnet policy; a local name only its row): their queued
	// tasks use no secret, even one granted to role:member.
	denied("ghost, a removed local user", may("ghost", "by-role"), "ghost is no longer a Podium user", "podium user add ghost")
	// Admins: every secret; a missing one is missing.
	for _, admin := range []string{"root", "token"} {
		if err := may(admin, "admins", "by-name"); err != nil {
			t.Errorf("%s: %v", admin, err)
		}
		var missing *secrets.MissingError
		if err := may(admin, "nope"); !errors.As(err, &missing) {
			t.Errorf("%s naming a missing secret: %v, want a MissingError", admin, err)
		}
	}
	// Demoted to viewer: nothing, and the error says what to ask for.
	if _, err := st.SetUserRole(ctx, "alice", "viewer"); err != nil {
		t.Fatal(err)
	}
	denied("alice as a viewer", may("alice", "by-name"), "alice is a viewer", "podium user set-role alice member")
	// "token" is the bootstrap token's name and reserved: a user row of
	// that name left from before is ignored (it cannot sign in either), so
	// it cannot make the bootstrap's tasks a member's, nor a member's the
	// bootstrap's.
	if _, err := st.AddUser(ctx, "token", "member", hash("token"), "token"); err != nil {
		t.Fatal(err)
	}
	if err := may("token", "admins"); err != nil {
		t.Errorf("the bootstrap token with a leftover user row named token: %v, want it still the admin", err)
	}

	// Listing: a member sees what they may use; an admin all.
	names, all, err := secrets.Usable(ctx, st, "carol@example.com")
	if err != nil || all || strings.Join(names, ",") != "by-role,login" {
		t.Errorf("Usable(carol) = %v, %v, %v; want by-role and login", names, all, err)
	}
	if _, all, err := secrets.Usable(ctx, st, "root"); err != nil || !all {
		t.Errorf("Usable(root) = %v, %v; want all", all, err)
	}

	// The API's answer: PermissionDenied for a member, with a word for
	// an admin by the tailnet policy alone, whom secrets take for a member.
	caller := tailnet.Caller{Kind: tailnet.KindPerson, Login: "carol@example.com", Role: "admin", RoleFrom: "tailnet grant"}
	err = secrets.CallError(tailnet.WithCaller(ctx, caller), may("carol@example.com", "admins"))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "admin by tailnet grant") ||
		!strings.Contains(err.Error(), "podium user add carol@example.com --role admin") {
		t.Errorf("CallError for a tailnet-granted admin = %v", err)
	}
	if err := secrets.CallError(ctx, may("root", "nope")); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no secret named nope") {
		t.Errorf("CallError for an admin's missing secret = %v", err)
	}
}
