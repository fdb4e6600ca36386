// Package downloads serves the podium CLI's static binaries from the
// coordinator at /download/, so that a teammate gets the CLI onto a laptop
// with one curl from the coordinator they already use, and checks it against
// the SHA-256 the coordinator publishes beside it.
//
// The directory (serve --download-dir) is read once, at start: each file
// named podium-OS-ARCH is hashed then, and only those names are ever served,
// so no request can reach any other file. The coordinator's image carries
// the binaries of its own version.
package downloads

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Prefix is where the binaries are served.
const Prefix = "/download/"

// SumsName is the file of SHA-256 sums, in sha256sum's format.
const SumsName = "SHA256SUMS"

// namePattern is what a served binary is called: podium-linux-amd64 and the
// like. Anything else in the directory is ignored.
var namePattern = regexp.MustCompile(`^podium-(linux|darwin)-(amd64|arm64)$`)

// maxBinary bounds one file: the CLI is some tens of MiB; a file far bigger
// is not it, and hashing it would hold up the coordinator's start.
const maxBinary = 512 << 20

// File is one binary served.
type File struct {
	Name   string
	Size   int64
	SHA256 string
	path   string
	mod    time.Time
}

// Set is the binaries found in the directory.
type Set struct {
	files []File
}

// Load reads dir. A coordinator without binaries serves none, and says why
// (the second result): no directory set, or none in it. A directory or file
// that cannot be read is an error: the operator asked for something that
// does not work.
func Load(dir string, log *slog.Logger) (*Set, string, error) {
	if dir == "" {
		why := "no download directory is set (--download-dir, PODIUM_DOWNLOAD_DIR)"
		log.Info("downloads: the podium CLI is not served: " + why)
		return nil, why, nil
	}
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		why := "the download directory (--download-dir, PODIUM_DOWNLOAD_DIR) does not exist"
		log.Info("downloads: the podium CLI is not served: "+why, "dir", dir)
		return nil, why, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read the download directory %s: %w (check --download-dir)", dir, err)
	}
	s := &Set{}
	for _, e := range entries {
		if !namePattern.MatchString(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		f, err := hashFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, "", fmt.Errorf("downloads: %w (check --download-dir)", err)
		}
		s.files = append(s.files, f)
	}
	if len(s.files) == 0 {
		why := "the download directory (--download-dir, PODIUM_DOWNLOAD_DIR) holds no podium-OS-ARCH binaries: " +
			"put them there (the coordinator's image carries its own version's)"
		log.Info("downloads: the podium CLI is not served: "+why, "dir", dir)
		return nil, why, nil
	}
	slices.SortFunc(s.files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	log.Info("downloads: serving the podium CLI", "files", s.Names())
	return s, "", nil
}

// hashFile measures and hashes one binary, refusing anything but a regular
// file (no link is followed) and anything bigger than maxBinary.
func hashFile(path string) (File, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return File{}, err
	}
	if !st.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxBinary {
		return File{}, fmt.Errorf("%s is %d bytes, more than %d: it is not the podium CLI", path, st.Size(), maxBinary)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxBinary+1))
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	return File{Name: filepath.Base(path), Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), path: path, mod: st.ModTime()}, nil
}

// Names are the binaries served, sorted.
func (s *Set) Names() []string {
	names := make([]string, len(s.files))
	for i, f := range s.files {
		names[i] = f.Name
	}
	return names
}

// Files are the binaries served, sorted by name.
func (s *Set) Files() []File { return slices.Clone(s.files) }

// Sums is SHA256SUMS: one "HASH  NAME" line per binary, as sha256sum -c reads.
func (s *Set) Sums() string {
	var b strings.Builder
	for _, f := range s.files {
		fmt.Fprintf(&b, "%s  %s\n", f.SHA256, f.Name)
	}
	return b.String()
}

// ServeHTTP serves the index at Prefix, SHA256SUMS and each binary; any
// other name is 404.
func (s *Set) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	switch name {
	case "":
		s.index(w, r)
		return
	case SumsName:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, s.Sums())
		return
	}
	i := slices.IndexFunc(s.files, func(f File) bool { return f.Name == name })
	if i < 0 {
		http.Error(w, fmt.Sprintf("no file %q here: this coordinator serves %s and %s (see %s)",
			name, strings.Join(s.Names(), ", "), SumsName, Prefix), http.StatusNotFound)
		return
	}
	f := s.files[i]
	// What was hashed at start, and only that: no link put in its place
	// since is followed, and a file that changed size is not served under
	// the old sum.
	fh, err := os.OpenFile(f.path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		http.Error(w, "the file could not be read on the coordinator", http.StatusInternalServerError)
		return
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		http.Error(w, "the file changed on the coordinator since it started; restart it to serve the new one", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="podium"`)
	h.Set("X-Podium-Sha256", f.SHA256)
	http.ServeContent(w, r, f.Name, f.mod, fh)
}

var indexPage = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Get the podium CLI</title></head>
<body>
<h1>Get the podium CLI</h1>
<p>Static binaries of this coordinator's version, with their SHA-256 (also in <a href="{{.Prefix}}{{.Sums}}">{{.Sums}}</a>):</p>
<table>
<thead><tr><th>File</th><th>Size</th><th>SHA-256</th></tr></thead>
<tbody>{{range .Files}}<tr><td><a href="{{$.Prefix}}{{.Name}}">{{.Name}}</a></td><td>{{.Size}} bytes</td><td><code>{{.SHA256}}</code></td></tr>
{{end}}</tbody>
</table>
<p>On Linux, for example:</p>
<pre><code>curl -fLO {{.Base}}{{.Prefix}}podium-linux-amd64
curl -fLO {{.Base}}{{.Prefix}}{{.Sums}}
sha256sum --ignore-missing -c {{.Sums}}
install -m 0755 podium-linux-amd64 ~/.local/bin/podium
podium login --server {{.Base}}</code></pre>
<p>On a Debian or Ubuntu machine that uses this coordinator's apt repository (<code>/install.sh</code> sets it up),
<code>sudo apt install podium</code> installs the same CLI.</p>
</body></html>
`))

func (s *Set) index(w http.ResponseWriter, r *http.Request) {
	base := "http://" + r.Host
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		base = "https://" + r.Host
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = indexPage.Execute(w, struct {
		Prefix, Sums, Base string
		Files              []File
	}{Prefix, SumsName, base, s.files})
}

// Unserved answers /download/ on a coordinator that serves no binaries,
// saying why and what to set.
func Unserved(why string) http.Handler {
	msg := "This Podium coordinator serves no podium CLI binaries: " + why + ". See README.md, \"Installing the CLI\"."
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, msg, http.StatusNotFound)
	})
}
