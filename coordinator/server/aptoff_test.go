package server_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// A coordinator that serves no apt repository says why and what to set at
// /install.sh and /apt/, instead of a bare 404: the install script is still a
// script, one that prints the reason and fails when piped to sh.
func TestNoAptRepositorySaysWhatToConfigure(t *testing.T) {
	t.Parallel()
	r := coordtest.Start(t, pgtest.NewDatabase(t).URL, coordtest.Options{})
	code, body := send(t, r, http.MethodGet, "/apt/dists/stable/InRelease", "127.0.0.1", "", "")
	if code != http.StatusNotFound || !strings.Contains(body, "serves no apt repository: no package directory is set (--apt-dir, PODIUM_APT_DIR)") {
		t.Errorf("GET /apt/…: %d %q, want 404 saying no --apt-dir is set", code, body)
	}
	code, script := send(t, r, http.MethodGet, "/install.sh", "127.0.0.1", "", "")
	if code != http.StatusNotFound || !strings.HasPrefix(script, "#!/bin/sh\n") {
		t.Fatalf("GET /install.sh: %d %q, want 404 with a shell script", code, script)
	}
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "no package directory is set (--apt-dir, PODIUM_APT_DIR)") {
		t.Errorf("the script piped to sh: %v, output %q; want exit 1 saying what to set", err, out)
	}
}

// /readyz says a configured optional part is on: a replica with a secrets
// key lists secrets as on and the parts it lacks as off.
func TestReadyzSaysWhichPartsAreOn(t *testing.T) {
	t.Parallel()
	r := coordtest.Start(t, pgtest.NewDatabase(t).URL, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)})
	var body string
	wait.For(t, 30*time.Second, "/readyz to answer ready", func() bool {
		var code int
		code, body = get(t, r.URL()+"/readyz")
		return code == http.StatusOK
	})
	for _, want := range []string{"\n  secrets: on\n", "\n  object store for artifacts and log archives: off (", "\n  TLS: off ("} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz answered %q, want it to say %q", body, want)
		}
	}
}
