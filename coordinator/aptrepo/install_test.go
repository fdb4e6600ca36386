package aptrepo

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// installRun is what one run of install.sh did.
type installRun struct {
	code     int
	stdout   string
	stderr   string
	keyring  []byte // /etc/apt/keyrings/podium.gpg afterwards, nil if none
	aptCalls string // the apt-get commands it ran
}

// runInstall fetches install.sh from a coordinator's handlers over HTTP and
// runs it with sh, as `curl … | sudo FINGERPRINT=… sh` would, as root in a
// mount namespace of its own where /etc/apt is an empty tmpfs: the script
// writes its keyring and sources there, never into this machine's apt.
// apt-get and dpkg-query are recorders ahead of the real ones on PATH (the
// packaging test, test/packaging, runs the real apt); everything the
// script does with the key (download, fingerprint, refusal) is real.
func runInstall(t *testing.T, base string, env ...string) installRun {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs install.sh as root in a mount namespace of its own (unshare -m): run it as root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare is not installed: apt-get install util-linux")
	}
	dir := t.TempDir()
	res, err := http.Get(base + InstallPath)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET install.sh: %s", res.Status)
	}
	write := func(name, content string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("install.sh", string(script), 0o644)
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("bin/apt-get", "#!/bin/sh\necho \"apt-get $*\" >>"+filepath.Join(dir, "apt-calls")+"\n", 0o755)
	write("bin/dpkg-query", "#!/bin/sh\necho 1.0.0-1\n", 0o755)
	write("apt-calls", "", 0o644)
	inner := `set -e
mount -t tmpfs tmpfs /etc/apt
mkdir -p /etc/apt/sources.list.d
rc=0
PATH="$DIR/bin:$PATH" sh "$DIR/install.sh" >"$DIR/stdout" 2>"$DIR/stderr" || rc=$?
cp /etc/apt/keyrings/podium.gpg "$DIR/keyring" 2>/dev/null || true
exit $rc`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", inner)
	cmd.Env = append(append(os.Environ(), "DIR="+dir), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	run := installRun{}
	if ee, ok := err.(*exec.ExitError); ok {
		run.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("unshare: %v\n%s", err, out.String())
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil
		}
		return b
	}
	run.stdout, run.stderr, run.keyring, run.aptCalls = string(read("stdout")), string(read("stderr")), read("keyring"), string(read("apt-calls"))
	return run
}

// install.sh pins the repository's signing key: with FINGERPRINT (as
// `podium-coordinator apt key` prints it, spaced or not, any case) the key
// downloaded must have it, else nothing is installed and the refusal names
// both fingerprints; without it the key is trusted on first use, loudly,
// with its fingerprint to compare. The script's fingerprint is gpg's.
func TestInstallScriptPinsTheKeyFingerprint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	s := signer(t)
	repo, err := Build(dir, s, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, repo)
	mux.Handle(InstallPath, repo.InstallHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	fp := s.Fingerprint()

	// gpg agrees with the fingerprint printed.
	key := filepath.Join(t.TempDir(), "podium.gpg")
	if err := os.WriteFile(key, s.PublicKey(), 0o644); err != nil {
		t.Fatal(err)
	}
	shown, err := exec.Command("gpg", "--homedir", t.TempDir(), "--show-keys", "--with-colons", key).Output()
	if err != nil {
		t.Fatalf("gpg --show-keys: %v", err)
	}
	if !strings.Contains(string(shown), "fpr:::::::::"+fp+":") {
		t.Fatalf("gpg says the key's fingerprint is not %s:\n%s", fp, shown)
	}

	wrong := strings.Repeat("0123456789", 4)
	run := runInstall(t, srv.URL, "FINGERPRINT="+wrong)
	if run.code == 0 || !strings.Contains(run.stderr, "has fingerprint "+fp+", not the FINGERPRINT you gave ("+wrong+")") ||
		!strings.Contains(run.stderr, "podium-coordinator apt key") {
		t.Errorf("a wrong FINGERPRINT: exit %d, stderr:\n%s\nwant a refusal naming both fingerprints and podium-coordinator apt key", run.code, run.stderr)
	}
	if run.keyring != nil || run.aptCalls != "" {
		t.Errorf("a wrong FINGERPRINT left a keyring (%d bytes) or ran apt-get (%q)", len(run.keyring), run.aptCalls)
	}

	spaced := strings.ToLower(fp[:20] + " " + fp[20:])
	run = runInstall(t, srv.URL, "FINGERPRINT="+spaced)
	if run.code != 0 || !strings.Contains(run.stderr, "fingerprint is "+fp+", as FINGERPRINT says") {
		t.Fatalf("the right FINGERPRINT: exit %d, stderr:\n%s", run.code, run.stderr)
	}
	if !bytes.Equal(run.keyring, s.PublicKey()) || !strings.Contains(run.aptCalls, "apt-get install -y podium-agent") {
		t.Errorf("the right FINGERPRINT: keyring %d bytes (want the key's %d), apt-get ran %q", len(run.keyring), len(s.PublicKey()), run.aptCalls)
	}

	run = runInstall(t, srv.URL)
	if run.code != 0 || !strings.Contains(run.stderr, "No FINGERPRINT given") || !strings.Contains(run.stderr, "FINGERPRINT="+fp+" sh") {
		t.Errorf("no FINGERPRINT: exit %d, stderr:\n%s\nwant a loud trust-on-first-use warning with the fingerprint", run.code, run.stderr)
	}

	// apt trusts every key of a Signed-By keyring: the genuine key with an
	// attacker's appended after it passes a check of the first key alone,
	// so a keyring of more than one key is refused, pinned or not.
	appended := append(append([]byte(nil), s.PublicKey()...), signer(t).PublicKey()...)
	evil := http.NewServeMux()
	evil.HandleFunc(Prefix+"podium.gpg", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(appended) })
	evil.Handle(Prefix, repo)
	evil.Handle(InstallPath, repo.InstallHandler())
	evilSrv := httptest.NewServer(evil)
	t.Cleanup(evilSrv.Close)
	for _, env := range [][]string{{"FINGERPRINT=" + fp}, nil} {
		run = runInstall(t, evilSrv.URL, env...)
		if run.code == 0 || !strings.Contains(run.stderr, "is not one OpenPGP v4 public key") || run.keyring != nil || len(run.aptCalls) != 0 {
			t.Errorf("a keyring with a second key appended (env %v): exit %d, keyring %d bytes, apt-get %q, stderr:\n%s\nwant it refused, nothing installed",
				env, run.code, len(run.keyring), run.aptCalls, run.stderr)
		}
	}
}
