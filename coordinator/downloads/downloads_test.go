package downloads_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/downloads"
)

var quiet = slog.New(slog.DiscardHandler)

func get(t *testing.T, h http.Handler, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), body
}

// The binaries in the directory are served byte for byte under their own
// names, with the SHA-256 the index and SHA256SUMS publish (in sha256sum's
// format); nothing else in the directory is: not another file, not a link,
// not a path outside it.
func TestServesTheBinariesWithTheirSums(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bins := map[string][]byte{}
	for _, name := range []string{"podium-linux-amd64", "podium-linux-arm64"} {
		b := make([]byte, 100_000)
		_, _ = rand.Read(b)
		bins[name] = b
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not for download"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "podium-darwin-arm64")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, why, err := downloads.Load(dir, quiet)
	if err != nil || s == nil {
		t.Fatalf("Load: %v (%s)", err, why)
	}
	if got := strings.Join(s.Names(), ","); got != "podium-linux-amd64,podium-linux-arm64" {
		t.Fatalf("served %s; want the two binaries, not the link or the other file", got)
	}

	_, sums := get(t, s, "/download/SHA256SUMS")
	for name, b := range bins {
		sum := sha256.Sum256(b)
		line := hex.EncodeToString(sum[:]) + "  " + name + "\n"
		if !strings.Contains(string(sums), line) {
			t.Errorf("SHA256SUMS lacks %q:\n%s", line, sums)
		}
		res, body := get(t, s, "/download/"+name)
		if res.StatusCode != http.StatusOK || string(body) != string(b) || res.Header.Get("X-Podium-Sha256") != hex.EncodeToString(sum[:]) {
			t.Errorf("GET %s: %s, %d bytes (want %d), X-Podium-Sha256 %q", name, res.Status, len(body), len(b), res.Header.Get("X-Podium-Sha256"))
		}
		res, body = get(t, s, "/download/"+name, "Range", "bytes=10-19")
		if res.StatusCode != http.StatusPartialContent || string(body) != string(b[10:20]) {
			t.Errorf("a range of %s: %s, %q", name, res.Status, body)
		}
	}
	res, index := get(t, s, "/download/", "X-Forwarded-Proto", "https")
	if res.StatusCode != http.StatusOK || !strings.Contains(string(index), "podium-linux-arm64") ||
		!strings.Contains(string(index), "sha256sum --ignore-missing -c SHA256SUMS") || !strings.Contains(string(index), "https://example.com/download/") {
		t.Errorf("the index page: %s\n%s", res.Status, index)
	}
	for _, path := range []string{"/download/podium-darwin-arm64", "/download/notes.txt", "/download/../secret", "/download/podium-linux-amd64/x"} {
		res, body := get(t, s, path)
		if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "not for download") || strings.Contains(string(body), "hello") {
			t.Errorf("GET %s: %s %q; want 404", path, res.Status, body)
		}
	}
	if _, body := get(t, s, "/download/notes.txt"); !strings.Contains(string(body), "podium-linux-amd64, podium-linux-arm64") {
		t.Errorf("a 404 does not say what is served: %q", body)
	}
	// A binary replaced by a link after the start is not followed.
	arm := filepath.Join(dir, "podium-linux-arm64")
	if err := os.Remove(arm); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, arm); err != nil {
		t.Fatal(err)
	}
	if res, body := get(t, s, "/download/podium-linux-arm64"); res.StatusCode == http.StatusOK || strings.Contains(string(body), "not for download") {
		t.Errorf("a binary replaced by a link was served: %s %q", res.Status, body)
	}
}

// Without binaries nothing is served, and the answer says why and what to
// set; a file that cannot be what it claims (far too big) stops the start.
func TestNothingToServeSaysWhy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dir, says string }{
		{"", "no download directory is set (--download-dir, PODIUM_DOWNLOAD_DIR)"},
		{filepath.Join(t.TempDir(), "absent"), "does not exist"},
		{t.TempDir(), "holds no podium-OS-ARCH binaries"},
	} {
		s, why, err := downloads.Load(c.dir, quiet)
		if s != nil || err != nil || !strings.Contains(why, c.says) {
			t.Errorf("Load(%q): %v, %q, %v; want nothing served saying %q", c.dir, s, why, err, c.says)
		}
		res, body := get(t, downloads.Unserved(why), "/download/podium-linux-amd64")
		if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), c.says) {
			t.Errorf("unserved: %s %q", res.Status, body)
		}
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "podium-linux-amd64"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(600 << 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, _, err := downloads.Load(dir, quiet); err == nil || !strings.Contains(err.Error(), "it is not the podium CLI") {
		t.Errorf("a 600 MiB podium-linux-amd64: %v; want the start refused", err)
	}
}
