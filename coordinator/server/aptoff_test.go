package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	for _, want := range []string{"\n  secrets: on\n", "\n  object store for artifacts and log archives: off (", "\n  TLS: off (",
		"\n  podium CLI downloads at /download/: off (no download directory is set (--download-dir, PODIUM_DOWNLOAD_DIR))\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz answered %q, want it to say %q", body, want)
		}
	}
}

// A replica given a download directory serves the CLI in it at /download/,
// without a token (it is what a person installs before they have one), says
// so in /readyz, and its console's sign-in page points there with the
// commands; without one, /download/ answers 404 saying what to set.
func TestServesTheCLIForDownload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := []byte("\x7fELF a podium binary")
	if err := os.WriteFile(filepath.Join(dir, "podium-linux-amd64"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	r := coordtest.Start(t, pgtest.NewDatabase(t).URL, coordtest.Options{DownloadDir: dir})
	var body string
	wait.For(t, 30*time.Second, "/readyz to answer ready", func() bool {
		var code int
		code, body = get(t, r.URL()+"/readyz")
		return code == http.StatusOK
	})
	if !strings.Contains(body, "\n  podium CLI downloads at /download/: on\n") {
		t.Errorf("/readyz does not say the downloads are on:\n%s", body)
	}
	if code, got := get(t, r.URL()+"/download/podium-linux-amd64"); code != http.StatusOK || got != string(bin) {
		t.Errorf("GET /download/podium-linux-amd64 without a token: %d %q", code, got)
	}
	sum := sha256.Sum256(bin)
	if code, got := get(t, r.URL()+"/download/SHA256SUMS"); code != http.StatusOK || got != hex.EncodeToString(sum[:])+"  podium-linux-amd64\n" {
		t.Errorf("GET /download/SHA256SUMS: %d %q", code, got)
	}
	if code, got := get(t, r.URL()+"/console/login"); code != http.StatusOK || !strings.Contains(got, `id="get-cli"`) ||
		!strings.Contains(got, "curl -fLO "+r.URL()+"/download/podium-linux-amd64") {
		t.Errorf("the sign-in page does not show how to get the CLI: %d\n%s", code, got)
	}

	none := coordtest.Start(t, pgtest.NewDatabase(t).URL, coordtest.Options{})
	if code, got := get(t, none.URL()+"/download/podium-linux-amd64"); code != http.StatusNotFound || !strings.Contains(got, "--download-dir") {
		t.Errorf("GET /download/ with no binaries: %d %q; want 404 saying what to set", code, got)
	}
	if _, got := get(t, none.URL()+"/console/login"); strings.Contains(got, `id="get-cli"`) {
		t.Errorf("the sign-in page points to downloads that are not served")
	}
}
