package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// TestMain lets a test run this command's main in a process of its own, with
// an environment of its own: when PODIUM_COORDINATOR_TEST_MAIN is set, the test
// binary is podium-coordinator.
func TestMain(m *testing.M) {
	if os.Getenv("PODIUM_COORDINATOR_TEST_MAIN") != "" {
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	pgtest.Main(m)
}

// coordinator runs podium-coordinator with args and the environment given (and
// nothing of the test's), and returns what it printed and its exit code.
func coordinator(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{"PODIUM_COORDINATOR_TEST_MAIN=1", "PATH=" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// serve -h lists every flag with its default, but never the value of a secret
// taken from the environment: not the API token, not the password in the
// Postgres URL, not the S3 secret key.
func TestHelpShowsNoSecrets(t *testing.T) {
	t.Parallel()
	env := []string{
		"PODIUM_TOKEN=tok-X0123456789abcdef0123456789abcdef",
		"PODIUM_DATABASE_URL=postgres://podium:pw-Y3cr3t@db.example:5432/podium",
		"PODIUM_S3_SECRET_KEY=s3-Zsecret",
	}
	for _, args := range [][]string{{"serve", "-h"}, {"migrate", "-h"}, {"help", "serve"}} {
		out, code := coordinator(t, env, args...)
		// Listed as the other two binaries list theirs: --name, never Go's
		// "-name type" layout, and help is no error.
		if code != 0 || !strings.Contains(out, "\n  --database value") || strings.Contains(out, "\n  -database") {
			t.Fatalf("%s: exit %d, want its flags listed as --database:\n%s", args, code, out)
		}
		for _, secret := range []string{"tok-X", "pw-Y3cr3t", "s3-Zsecret", "db.example"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows %q:\n%s", args, secret, out)
			}
		}
	}
}

// What the coordinator refuses at start, it refuses before touching Postgres,
// saying what to do instead.
func TestServeRefusals(t *testing.T) {
	t.Parallel()
	long := "PODIUM_TOKEN=" + strings.Repeat("t", 32)
	db := "PODIUM_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	for _, tc := range []struct {
		env  []string
		args []string
		says string
	}{
		{[]string{db, "PODIUM_TOKEN=short"}, nil, "openssl rand -hex 32"},
		{[]string{db, long}, []string{"--listen", "0.0.0.0:0"}, "--allow-non-loopback"},
		{[]string{db, long}, []string{"--listen", "0.0.0.0:0", "--allow-non-loopback"}, "--insecure-plaintext"},
		{[]string{db, long, "PODIUM_LISTEN=0.0.0.0:0", "PODIUM_ALLOW_NON_LOOPBACK=1"}, nil, "--tls-cert and --tls-key"},
		{[]string{db, long}, []string{"--tls-cert", "cert.pem"}, "both a certificate and its key"},
		{[]string{db, long}, []string{"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"}, "/nonexistent/cert.pem"},
		{[]string{db, long, "PODIUM_MAX_CONNECTIONS=many"}, nil, "PODIUM_MAX_CONNECTIONS"},
		{[]string{db, long}, []string{"--max-connections", "0"}, "--max-connections"},
		// Told that something else encrypts, it goes on, and fails only at
		// Postgres, which is not there.
		{[]string{db, long}, []string{"--listen", "0.0.0.0:0", "--allow-non-loopback", "--insecure-plaintext"}, "Postgres"},
	} {
		out, code := coordinator(t, tc.env, append([]string{"serve"}, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.says) {
			t.Errorf("serve %s with %s: exit %d, want a refusal saying %q:\n%s", tc.args, tc.env[1:], code, tc.says, out)
		}
	}
}
