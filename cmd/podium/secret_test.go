package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// podium secret set/ls/rm and run --secret against a real coordinator: the
// value goes in from stdin or a file, never from argv; ls shows names, who
// and when but no value; a task naming a missing secret is refused before
// anything is stored; task get --json shows the secret's name and variable,
// never its value; rm removes it.
func TestSecretCommandsOnARealCoordinator(t *testing.T) {
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
	const value = "stdin-value-0123456789"
	if code, _, errOut := podium(value+"\n", "secret", "set", "db-password"); code != 0 || !strings.Contains(errOut, "secret db-password created (22 bytes)") {
		t.Fatalf("secret set from stdin: exit %d:\n%s", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "deploy.pem")
	if err := os.WriteFile(file, []byte("-----KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := podium("", "secret", "set", "deploy-key", "--from-file", file); code != 0 || !strings.Contains(errOut, "created (14 bytes)") {
		t.Fatalf("secret set --from-file: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("x", "secret", "set", "db-password"); code != 0 || !strings.Contains(errOut, "secret db-password replaced") {
		t.Fatalf("secret set again: exit %d:\n%s", code, errOut)
	}
	if code, _, _ := podium(value, "secret", "set", "db-password"); code != 0 {
		t.Fatal("setting the value back failed")
	}
	for _, c := range []struct {
		stdin string
		args  []string
		says  string
	}{
		{"", []string{"secret", "set", "db-password", value}, "never taken from the command line"},
		{"", []string{"secret", "set", "db-password"}, "the value is empty"},
		{"x", []string{"secret", "set", "DB"}, "lower-case"},
		{strings.Repeat("x", 64<<10+1), []string{"secret", "set", "big"}, "more than 65536 bytes"},
		{"", []string{"secret", "set", "a", "--from-file", filepath.Join(t.TempDir(), "absent")}, "no such file"},
	} {
		if code, _, errOut := podium(c.stdin, c.args...); code != exitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("podium %s: exit %d, want %d saying %q:\n%s", c.args, code, exitUsage, c.says, errOut)
		}
	}
	code, out, errOut := podium("", "secret", "ls")
	if code != 0 || !strings.Contains(out, "NAME") || !strings.Contains(out, "db-password") || !strings.Contains(out, "deploy-key") ||
		!strings.Contains(out, "token") || strings.Contains(out, value) || strings.Contains(out, "big") {
		t.Fatalf("secret ls: exit %d:\n%s%s", code, out, errOut)
	}
	// VERSION counts the values each has had: db-password was set three times.
	versions := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			versions[f[0]] = f[1]
		}
	}
	if versions["NAME"] != "VERSION" || versions["db-password"] != "3" || versions["deploy-key"] != "1" {
		t.Fatalf("secret ls: want a VERSION column with db-password at 3 and deploy-key at 1:\n%s", out)
	}
	if code, out, _ := podium("", "secret", "ls", "--json"); code != 0 || !strings.Contains(out, `"name": "deploy-key"`) || strings.Contains(out, value) {
		t.Fatalf("secret ls --json: exit %d:\n%s", code, out)
	}
	code, _, errOut = podium("", "run", "--image", "busybox", "--secret", "nope", "--detach", "--", "true")
	if code != exitPodium || !strings.Contains(errOut, "no secret named nope") {
		t.Fatalf("run --secret nope: exit %d, want %d naming the missing secret:\n%s", code, exitPodium, errOut)
	}
	if code, out, _ := podium("", "tasks", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("tasks after the refused run: %s, want none", out)
	}
	code, out, errOut = podium("", "run", "--image", "busybox", "--secret", "db-password", "--secret", "deploy-key=KEY", "--detach", "--", "true")
	if code != 0 {
		t.Fatalf("run --secret: exit %d:\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	code, out, _ = podium("", "task", "get", "--json", id)
	if code != 0 || strings.Contains(out, value) || !strings.Contains(out, `"DB_PASSWORD"`) || !strings.Contains(out, `"KEY"`) {
		t.Fatalf("task get --json: exit %d; want the secrets' names and variables, never a value:\n%s", code, out)
	}
	code, out, _ = podium("", "task", "get", id)
	if code != 0 || strings.Contains(out, value) || !strings.Contains(out, "db-password as $DB_PASSWORD, deploy-key as $KEY") {
		t.Fatalf("task get: exit %d; want the secrets' names and variables, never a value:\n%s", code, out)
	}
	if code, _, errOut := podium("", "secret", "rm", "deploy-key"); code != 0 || !strings.Contains(errOut, "secret deploy-key deleted") {
		t.Fatalf("secret rm: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := podium("", "secret", "rm", "deploy-key"); code != exitUsage || !strings.Contains(errOut, "no secret named deploy-key") {
		t.Fatalf("secret rm twice: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("", "secret", "ls"); code != 0 || strings.Contains(out, "deploy-key") {
		t.Fatalf("secret ls after rm:\n%s", out)
	}
}

// Who may use a secret, from the CLI against a real coordinator: set
// --allow grants in the same call; a member's run naming a secret not
// granted to them is refused saying how to get it, and nothing is stored;
// grant lets them, revoke refuses a principal the secret does not have.
// secret ls shows an admin every secret with ALLOW, a member only those
// they may use and no ALLOW.
func TestSecretGrantCommandsOnARealCoordinator(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	added, err := r.Admin().AddUser(context.Background(), connect.NewRequest(&podiumv1.AddUserRequest{Name: "bob", Role: "member"}))
	if err != nil {
		t.Fatal(err)
	}
	as := func(token string) func(stdin string, args ...string) (int, string, string) {
		return func(stdin string, args ...string) (int, string, string) {
			tc := newTestCLI(map[string]string{"PODIUM_SERVER": r.URL(), "PODIUM_TOKEN": token})
			tc.stdin = strings.NewReader(stdin)
			code := tc.run(t, args...)
			return code, tc.out.String(), tc.errOut.String()
		}
	}
	admin, bob := as(coordtest.Token), as(added.Msg.Token)

	if code, _, errOut := admin("deploy-value\n", "secret", "set", "deploy-key", "--allow", "alice", "--allow", "group:ml"); code != 0 ||
		!strings.Contains(errOut, "secret deploy-key created") || !strings.Contains(errOut, "granted to alice, group:ml") {
		t.Fatalf("secret set --allow: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := admin("ci-value", "secret", "set", "ci-token"); code != 0 {
		t.Fatalf("secret set: exit %d:\n%s", code, errOut)
	}
	code, out, errOut := admin("", "secret", "ls")
	if code != 0 || !strings.Contains(out, "ALLOW") || !regexp.MustCompile(`deploy-key\s+1\s+token\s+\S+\s+alice,group:ml`).MatchString(out) ||
		!regexp.MustCompile(`ci-token\s+1\s+token\s+\S+\s+admins only`).MatchString(out) {
		t.Fatalf("admin's secret ls: exit %d, want both with ALLOW:\n%s%s", code, out, errOut)
	}
	code, out, errOut = bob("", "secret", "ls")
	if code != 0 || strings.Contains(out, "ALLOW") || strings.Contains(out, "deploy-key") || strings.Contains(out, "ci-token") ||
		!strings.Contains(errOut, "no secret is granted to you") || !strings.Contains(errOut, "podium secret grant NAME bob") {
		t.Fatalf("bob's secret ls before a grant: exit %d, want no secret:\n%s%s", code, out, errOut)
	}
	code, _, errOut = bob("", "run", "--image", "busybox", "--secret", "deploy-key", "--detach", "--", "true")
	if code != exitPodium || !strings.Contains(errOut, "bob may not use secret deploy-key") || !strings.Contains(errOut, "podium secret grant deploy-key bob") {
		t.Fatalf("bob's run --secret deploy-key: exit %d, want %d saying how to get a grant:\n%s", code, exitPodium, errOut)
	}
	if code, out, _ := admin("", "tasks", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("tasks after the refused run: %s, want none", out)
	}
	if code, _, errOut := bob("", "secret", "grant", "deploy-key", "bob"); code != exitPodium || !strings.Contains(errOut, "admin") {
		t.Fatalf("bob granting himself: exit %d, want %d naming the admin role:\n%s", code, exitPodium, errOut)
	}
	if code, _, errOut := admin("", "secret", "grant", "deploy-key", "bob"); code != 0 || !strings.Contains(errOut, "may be used by admins and alice, bob, group:ml") {
		t.Fatalf("secret grant: exit %d:\n%s", code, errOut)
	}
	code, out, errOut = bob("", "secret", "ls")
	if code != 0 || strings.Contains(out, "ALLOW") || !strings.Contains(out, "deploy-key") || strings.Contains(out, "ci-token") || strings.Contains(out, "alice") {
		t.Fatalf("bob's secret ls once granted: exit %d, want deploy-key alone, no grants:\n%s%s", code, out, errOut)
	}
	if code, _, errOut := bob("", "run", "--image", "busybox", "--secret", "deploy-key", "--detach", "--", "true"); code != 0 {
		t.Fatalf("bob's run once granted: exit %d:\n%s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"secret", "grant", "deploy-key"}, exitUsage, "at least one PRINCIPAL"},
		{[]string{"secret", "revoke"}, exitUsage, "want the secret's NAME"},
		{[]string{"secret", "grant", "Deploy", "bob"}, exitUsage, "lower-case"},
		{[]string{"secret", "grant", "deploy-key", "role:viewer"}, exitPodium, "viewers cannot submit"},
		{[]string{"secret", "grant", "nope", "bob"}, exitUsage, "no secret named nope"},
		{[]string{"secret", "revoke", "deploy-key", "carol"}, exitPodium, "not granted to carol"},
	} {
		if code, _, errOut := admin("", c.args...); code != c.code || !strings.Contains(errOut, c.says) {
			t.Errorf("podium %s: exit %d, want %d saying %q:\n%s", c.args, code, c.code, c.says, errOut)
		}
	}
	if code, _, errOut := admin("", "secret", "revoke", "deploy-key", "bob", "group:ml"); code != 0 || !strings.Contains(errOut, "may be used by admins and alice") {
		t.Fatalf("secret revoke: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := bob("", "run", "--image", "busybox", "--secret", "deploy-key", "--detach", "--", "true"); code != exitPodium || !strings.Contains(errOut, "bob may not use") {
		t.Fatalf("bob's run after the revoke: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := admin("", "help", "secret", "grant"); code != 0 || !strings.Contains(out, "group:NAME") || !strings.Contains(out, "role:member") {
		t.Fatalf("help secret grant: exit %d:\n%s", code, out)
	}
}
