package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// podium user rotate-token against a real coordinator: a member replaces
// their own token, and the old one stops working at once while the new one
// works; a member may not rotate another person's; an admin may, ending
// that person's old token; the bootstrap token is not a person's; an
// unknown person is a usage error; the call is in the audit log; and a
// person whose token podium login stored finds the stored copy replaced,
// so their next command still works.
func TestRotateTokenOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{})
	podium := func(env map[string]string, stdin string, args ...string) (int, string, string) {
		env["PODIUM_SERVER"] = r.URL()
		tc := newTestCLI(env)
		tc.stdin = strings.NewReader(stdin)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	as := func(token string) map[string]string { return map[string]string{"PODIUM_TOKEN": token} }
	admin := as(coordtest.Token)
	add := func(name string) string {
		code, out, errOut := podium(admin, "", "user", "add", name, "--role", "member")
		if code != 0 {
			t.Fatalf("user add %s: exit %d:\n%s", name, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	alice, bob := add("alice"), add("bob")
	works := func(token, who string) bool {
		code, out, _ := podium(as(token), "", "whoami")
		return code == 0 && strings.Contains(out, who)
	}

	code, out, errOut := podium(as(alice), "", "user", "rotate-token")
	alice2 := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(alice2, "podium_ut_") || alice2 == alice || !strings.Contains(errOut, "alice has a new token") {
		t.Fatalf("alice rotates her own token: exit %d, stdout %q:\n%s", code, out, errOut)
	}
	if works(alice, "alice") {
		t.Errorf("alice's old token still works after she rotated it")
	}
	if !works(alice2, "alice") {
		t.Errorf("alice's new token does not work")
	}

	if code, _, errOut := podium(as(alice2), "", "user", "rotate-token", "bob"); code != exitPodium ||
		!strings.Contains(errOut, "you may rotate only your own token") || strings.Contains(errOut, "admin role") {
		t.Errorf("a member rotating bob's token: exit %d:\n%s", code, errOut)
	}
	if !works(bob, "bob") {
		t.Fatalf("bob's token stopped working after a refused rotation by alice")
	}
	code, out, errOut = podium(admin, "", "user", "rotate-token", "bob")
	bob2 := strings.TrimSpace(out)
	if code != 0 || bob2 == bob || works(bob, "bob") || !works(bob2, "bob") {
		t.Errorf("an admin rotates bob's token: exit %d, new token works %v, old works %v:\n%s", code, works(bob2, "bob"), works(bob, "bob"), errOut)
	}
	if code, _, errOut := podium(admin, "", "user", "rotate-token"); code != exitPodium || !strings.Contains(errOut, "bootstrap token") {
		t.Errorf("rotating the bootstrap token: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium(admin, "", "user", "rotate-token", "carol"); code != exitUsage || !strings.Contains(errOut, "no user carol") {
		t.Errorf("rotating an unknown person's token: exit %d:\n%s", code, errOut)
	}
	if code, out, errOut := podium(admin, "", "audit"); code != 0 || !strings.Contains(out, "RotateUserToken") {
		t.Errorf("the audit log does not show the rotations: exit %d:\n%s%s", code, out, errOut)
	}

	// Stored by podium login: rotating replaces the stored copy.
	home := map[string]string{"HOME": t.TempDir()}
	if code, _, errOut := podium(home, alice2+"\n", "login"); code != 0 {
		t.Fatalf("login: exit %d:\n%s", code, errOut)
	}
	code, out, errOut = podium(home, "", "user", "rotate-token")
	alice3 := strings.TrimSpace(out)
	if code != 0 || !strings.Contains(errOut, "replaced the one stored in") {
		t.Fatalf("rotating a stored token: exit %d:\n%s", code, errOut)
	}
	b, err := os.ReadFile(filepath.Join(home["HOME"], ".config", "podium", "config.yaml"))
	if err != nil || !strings.Contains(string(b), alice3) {
		t.Errorf("the stored config does not hold the new token (%v):\n%s", err, b)
	}
	if code, out, errOut := podium(home, "", "whoami"); code != 0 || !strings.Contains(out, "alice") {
		t.Errorf("whoami with the stored token after rotating it: exit %d:\n%s%s", code, out, errOut)
	}
}
