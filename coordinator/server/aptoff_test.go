package server_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/test/testenv/pgtest"
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
