package aptrepo

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testSigner is one generated key for all the tests of the package.
var testSigner = sync.OnceValues(func() (*Signer, error) {
	raw, err := GenerateKey("Podium test repository")
	if err != nil {
		return nil, err
	}
	return NewSigner(raw)
})

func signer(t *testing.T) *Signer {
	t.Helper()
	s, err := testSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// buildDeb builds a small package with dpkg-deb, the way Debian does, into
// dir, and returns its path.
func buildDeb(t *testing.T, dir, name, version, arch, compression string) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatal("dpkg-deb is not installed: apt-get install dpkg (scripts/ensure-packaging.sh)")
	}
	root := filepath.Join(t.TempDir(), "root")
	for path, content := range map[string]string{
		"DEBIAN/control": fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: Podium tests <t@example.com>\n"+
			"Installed-Size: 12\nDepends: docker.io | docker-ce\nSection: admin\nPriority: optional\n"+
			"Description: a test package\n It has a long description\n .\n over three lines.\n", name, version, arch),
		"usr/share/doc/" + name + "/README": strings.Repeat("podium ", 1000),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name+"_"+version+"_"+arch+".deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Z"+compression, "--build", root, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, b)
	}
	return out
}

// stanzas splits a Packages index into its stanzas, each a map of field to
// value (continuation lines joined with newlines, as dpkg-deb -f prints them).
func stanzas(t *testing.T, index string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, s := range strings.Split(strings.TrimSpace(index), "\n\n") {
		if s == "" {
			continue
		}
		fields, err := parseControl([]byte(s))
		if err != nil {
			t.Fatalf("the index has a stanza that does not parse: %v\n%s", err, s)
		}
		m := map[string]string{}
		for _, f := range fields {
			m[f.name] = f.value
		}
		out = append(out, m)
	}
	return out
}

func get200(t *testing.T, h http.Handler, path string) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Each package's Packages stanza has the fields `dpkg-deb -f` reads from
// it, the repository's Filename, and its real size and hashes; the file
// served at Filename is the package. gzip, zstd and uncompressed control
// members are all read.
func TestPackagesMatchDpkgDeb(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	debs := []string{
		buildDeb(t, dir, "podium-agent", "1.2.3+git4.gabcdef0-1", "amd64", "gzip"),
		buildDeb(t, dir, "podium-agent", "1.2.3+git4.gabcdef0-1", "arm64", "zstd"),
		buildDeb(t, dir, "podium-extra", "2:0.1~rc1-1", "amd64", "none"),
	}
	repo, err := Build(dir, signer(t), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byArch := map[string][]map[string]string{}
	for _, arch := range Architectures {
		plain := get200(t, repo, "/apt/dists/stable/main/binary-"+arch+"/Packages")
		zr, err := gzip.NewReader(bytes.NewReader(get200(t, repo, "/apt/dists/stable/main/binary-"+arch+"/Packages.gz")))
		if err != nil {
			t.Fatal(err)
		}
		unzipped, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(unzipped, plain) {
			t.Fatalf("Packages.gz of %s is not Packages gzipped (err %v)", arch, err)
		}
		byArch[arch] = stanzas(t, string(plain))
	}
	if len(byArch["amd64"]) != 2 || len(byArch["arm64"]) != 1 {
		t.Fatalf("amd64 lists %d packages and arm64 %d, want 2 and 1", len(byArch["amd64"]), len(byArch["arm64"]))
	}
	for _, deb := range debs {
		out, err := exec.Command("dpkg-deb", "-f", deb).Output()
		if err != nil {
			t.Fatal(err)
		}
		want, err := parseControl(out)
		if err != nil {
			t.Fatal(err)
		}
		arch := get(want, "Architecture")
		var got map[string]string
		for _, s := range byArch[arch] {
			if s["Package"] == get(want, "Package") {
				got = s
			}
		}
		if got == nil {
			t.Fatalf("%s is not in the %s index", filepath.Base(deb), arch)
		}
		for _, f := range want {
			if got[f.name] != f.value {
				t.Errorf("%s: %s is %q in the index, dpkg-deb -f says %q", filepath.Base(deb), f.name, got[f.name], f.value)
			}
		}
		content, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(content)
		if got["Size"] != strconv.Itoa(len(content)) || got["SHA256"] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: Size %s SHA256 %s, want %d %x", filepath.Base(deb), got["Size"], got["SHA256"], len(content), sum)
		}
		for _, f := range []string{"MD5sum", "SHA1"} {
			if len(got[f]) == 0 {
				t.Errorf("%s: no %s", filepath.Base(deb), f)
			}
		}
		if served := get200(t, repo, "/apt/"+got["Filename"]); !bytes.Equal(served, content) {
			t.Errorf("%s: /apt/%s is not the package (%d bytes)", filepath.Base(deb), got["Filename"], len(served))
		}
	}
	// The epoch is not in the file name, as dpkg-name would have it.
	if f := byArch["amd64"][1]["Filename"]; f != "pool/main/p/podium-extra/podium-extra_0.1~rc1-1_amd64.deb" {
		t.Errorf("podium-extra's Filename is %q", f)
	}
}

// InRelease and Release.gpg verify with Debian's gpgv against the key the
// repository serves at /apt/podium.gpg, and the Release file lists each
// index with its real size and SHA256, so that one byte changed in a
// Packages file no longer matches.
func TestReleaseVerifiesWithGpgv(t *testing.T) {
	t.Parallel()
	gpgv, err := exec.LookPath("gpgv")
	if err != nil {
		t.Fatal("gpgv is not installed: apt-get install gpgv (scripts/ensure-packaging.sh does)")
	}
	dir := t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	repo, err := Build(dir, signer(t), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	keyring := filepath.Join(work, "podium.gpg")
	write := func(name string, b []byte) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("podium.gpg", get200(t, repo, "/apt/podium.gpg"))
	release := get200(t, repo, "/apt/dists/stable/Release")
	inRelease := write("InRelease", get200(t, repo, "/apt/dists/stable/InRelease"))
	if out, err := exec.Command(gpgv, "--keyring", keyring, inRelease).CombinedOutput(); err != nil {
		t.Fatalf("gpgv InRelease: %v\n%s", err, out)
	}
	sig := write("Release.gpg", get200(t, repo, "/apt/dists/stable/Release.gpg"))
	rel := write("Release", release)
	if out, err := exec.Command(gpgv, "--keyring", keyring, sig, rel).CombinedOutput(); err != nil {
		t.Fatalf("gpgv Release.gpg Release: %v\n%s", err, out)
	}
	// gpgv prints the signed text of InRelease: it is the Release file.
	signed, err := exec.Command(gpgv, "--keyring", keyring, "--output", "-", inRelease).Output()
	if err != nil || !bytes.Equal(signed, release) {
		t.Errorf("the text InRelease signs is not the Release file (err %v):\n%s\n---\n%s", err, signed, release)
	}
	// A changed Release does not verify.
	tampered := bytes.Replace(release, []byte("Suite: stable"), []byte("Suite: stablf"), 1)
	write("Release", tampered)
	if out, err := exec.Command(gpgv, "--keyring", keyring, sig, rel).CombinedOutput(); err == nil {
		t.Errorf("gpgv accepted a Release with one byte changed:\n%s", out)
	}
	// The armored key is the same key.
	if asc := get200(t, repo, "/apt/podium.asc"); !bytes.HasPrefix(asc, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
		t.Errorf("/apt/podium.asc is not an armored public key:\n%s", asc)
	}

	fields, err := parseControl(release)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"Suite": "stable", "Codename": "stable", "Components": "main", "Architectures": "amd64 arm64"} {
		if got := get(fields, name); got != want {
			t.Errorf("Release %s is %q, want %q", name, got, want)
		}
	}
	if _, err := time.Parse(time.RFC1123Z, get(fields, "Date")); err != nil {
		t.Errorf("Release Date %q: %v", get(fields, "Date"), err)
	}
	// Each index's SHA256 line in Release matches what is served, and
	// does not once a byte of it changes.
	listed := map[string]string{}
	for _, line := range strings.Split(get(fields, "SHA256"), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			listed[f[2]] = f[0] + " " + f[1]
		}
	}
	if len(listed) != 4 {
		t.Fatalf("Release lists %d indexes under SHA256, want 4:\n%s", len(listed), release)
	}
	digest := func(b []byte) string {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:]) + " " + strconv.Itoa(len(b))
	}
	for idx, want := range listed {
		b := get200(t, repo, "/apt/dists/stable/"+idx)
		if got := digest(b); got != want {
			t.Errorf("%s: Release lists %s, served %s", idx, want, got)
		}
		if len(b) > 0 {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 1
			if digest(b) == want {
				t.Errorf("%s with one byte changed still matches Release", idx)
			}
		}
	}
}

// Only the repository's own paths are served; anything else, traversal
// included, is a 404, and only GET and HEAD are allowed.
func TestBadPathsAreNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("not for apt"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := Build(dir, signer(t), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/apt/", "/apt/secret.txt", "/apt/pool/main/p/podium-agent/../../../../secret.txt",
		"/apt/dists/stable/../../secret.txt", "/apt/podium-agent_1.0.0-1_amd64.deb", "/apt/dists/stable/main/binary-riscv64/Packages",
		"/apt/dists/unstable/InRelease", "/apt//dists/stable/InRelease", "/apt/pool/main/p/podium-agent/", "/apt/%2e%2e/secret.txt",
		"/other",
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path = p
		repo.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
		if strings.Contains(rec.Body.String(), "not for apt") {
			t.Errorf("GET %s served a file outside the repository", p)
		}
	}
	rec := httptest.NewRecorder()
	repo.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/apt/dists/stable/InRelease", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
	rec = httptest.NewRecorder()
	repo.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/apt/dists/stable/InRelease", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("HEAD InRelease: %d, want 200", rec.Code)
	}
}

// A directory without packages is ErrNoPackages; a file that is not a
// package, or two files of the same package, are errors naming the file.
func TestBuildRefusals(t *testing.T) {
	t.Parallel()
	if _, err := Build(t.TempDir(), signer(t), time.Time{}); err == nil || !strings.Contains(err.Error(), "no .deb files") {
		t.Errorf("empty directory: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junk.deb"), []byte("!<arch>\nnot really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(dir, signer(t), time.Time{}); err == nil || !strings.Contains(err.Error(), "junk.deb") {
		t.Errorf("junk.deb: %v", err)
	}
	dir = t.TempDir()
	p := buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "copy.deb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(dir, signer(t), time.Time{}); err == nil || !strings.Contains(err.Error(), "same package") {
		t.Errorf("two copies of one package: %v", err)
	}
	dir = t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "xz")
	if _, err := Build(dir, signer(t), time.Time{}); err == nil || !strings.Contains(err.Error(), "-Zgzip") {
		t.Errorf("an xz control member: %v", err)
	}
}

// A key file readable by others, or without a private key, is refused with
// what to do.
func TestLoadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	asc, err := signer(t).ArmoredPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub.asc")
	if err := os.WriteFile(pub, asc, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(pub); err == nil || !strings.Contains(err.Error(), "no private key") {
		t.Errorf("a public key: %v", err)
	}
	raw, err := GenerateKey("t")
	if err != nil {
		t.Fatal(err)
	}
	priv := filepath.Join(dir, "priv.gpg")
	if err := os.WriteFile(priv, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(priv); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key readable by others: %v", err)
	}
	if err := os.Chmod(priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(priv); err != nil {
		t.Errorf("a good key: %v", err)
	}
}

// The install script names the coordinator as the client reached it, and
// refuses a Host that is no host name.
func TestInstallScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	repo, err := Build(dir, signer(t), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	h := repo.InstallHandler()
	req := httptest.NewRequest(http.MethodGet, "https://coord.example:7070/install.sh", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, "base='https://coord.example:7070'") ||
		!strings.Contains(body, "Signed-By: $keyring") || strings.Contains(body, "trusted=yes") {
		t.Fatalf("install.sh: %d\n%s", rec.Code, body)
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		if out, err := exec.Command(sh, "-n", "-c", body).CombinedOutput(); err != nil {
			t.Errorf("sh -n install.sh: %v\n%s", err, out)
		}
	}
	for _, host := range []string{"evil'host", "a b", "$(reboot)", "", "[::1", "x:99999999"} {
		req := httptest.NewRequest(http.MethodGet, "/install.sh", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("Host %q: %d, want 400", host, rec.Code)
		}
	}
}
