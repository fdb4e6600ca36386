package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/internal/testenv/coordtest"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
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
	if code, _, errOut := podium("", "secret", "rm", "deploy-key"); code != exitPodium || !strings.Contains(errOut, "no secret named deploy-key") {
		t.Fatalf("secret rm twice: exit %d:\n%s", code, errOut)
	}
	if code, out, _ := podium("", "secret", "ls"); code != 0 || strings.Contains(out, "deploy-key") {
		t.Fatalf("secret ls after rm:\n%s", out)
	}
}
