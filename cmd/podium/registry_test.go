package main

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// podium registry login/ls/rm against a real coordinator: the password goes
// in only from stdin with --password-stdin, never from argv, and is bounded
// before anything is sent; a bad host is refused by the coordinator naming
// the form it wants; ls (table and --json) shows host, user and who, never
// the password; rm removes the login and a second rm says there is none.
func TestRegistryCommandsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	env := map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": coordtest.Token}
	podium := func(stdin string, args ...string) (int, string, string) {
		tc := newTestCLI(env)
		tc.stdin = strings.NewReader(stdin)
		code := tc.run(t, args...)
		return code, tc.out.String(), tc.errOut.String()
	}
	const pw = "registry-password-0123"
	if code, _, errOut := podium(pw+"\n", "registry", "login", "reg.example:5000", "--username", "ci", "--password-stdin"); code != 0 ||
		!strings.Contains(errOut, "login for reg.example:5000 as ci stored") {
		t.Fatalf("registry login: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium(pw, "registry", "login", "reg.example:5000", "--username", "ci2", "--password-stdin"); code != 0 ||
		!strings.Contains(errOut, "as ci2 replaced") {
		t.Fatalf("registry login again: exit %d:\n%s", code, errOut)
	}
	for _, c := range []struct {
		stdin string
		args  []string
		says  string
	}{
		{"", []string{"registry", "login", "reg.example", "--username", "u", "--password-stdin", pw}, "never taken from the command line"},
		{pw, []string{"registry", "login", "reg.example", "--username", "u"}, "want --password-stdin"},
		{pw, []string{"registry", "login", "reg.example", "--password-stdin"}, "want --username"},
		{"\n", []string{"registry", "login", "reg.example", "--username", "u", "--password-stdin"}, "the password is empty"},
		{strings.Repeat("x", 4<<10+1), []string{"registry", "login", "reg.example", "--username", "u", "--password-stdin"}, "more than 4096 bytes"},
		{"", []string{"registry", "rm"}, "want exactly one registry HOST"},
	} {
		if code, _, errOut := podium(c.stdin, c.args...); code != exitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("podium %s: exit %d, want %d saying %q:\n%s", c.args, code, exitUsage, c.says, errOut)
		}
	}
	if code, _, errOut := podium(pw, "registry", "login", "https://reg.example/v2", "--username", "u", "--password-stdin"); code == 0 ||
		!strings.Contains(errOut, "is not host[:port]") {
		t.Fatalf("registry login with a URL: exit %d, want a refusal saying host[:port]:\n%s", code, errOut)
	}
	code, out, errOut := podium("", "registry", "ls")
	if code != 0 || !strings.Contains(out, "HOST") || !strings.Contains(out, "reg.example:5000") || !strings.Contains(out, "ci2") ||
		!strings.Contains(out, "token") || strings.Contains(out, pw) || strings.Contains(out, "https") {
		t.Fatalf("registry ls: exit %d:\n%s%s", code, out, errOut)
	}
	if code, out, _ := podium("", "registry", "ls", "--json"); code != 0 || !strings.Contains(out, `"host": "reg.example:5000"`) || strings.Contains(out, pw) {
		t.Fatalf("registry ls --json: exit %d:\n%s", code, out)
	}
	if code, _, errOut := podium("", "registry", "rm", "reg.example:5000"); code != 0 || !strings.Contains(errOut, "login for reg.example:5000 removed") {
		t.Fatalf("registry rm: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("", "registry", "rm", "reg.example:5000"); code == 0 || !strings.Contains(errOut, "no registry login for reg.example:5000") {
		t.Fatalf("registry rm again: exit %d, want a refusal saying there is none:\n%s", code, errOut)
	}
	if code, out, _ := podium("", "registry", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("registry ls after rm: %s, want none", out)
	}
}
