// Package aptrepo serves the podium-agent packages the coordinator carries
// as a signed apt repository, so that a node installs the agent with
// `apt install podium-agent` and moves to the coordinator's version with
// `apt upgrade`.
//
// The repository is generated in memory when the coordinator starts, from
// the .deb files in one directory (the image's /usr/share/podium/apt), and
// never changes while it runs: the indexes are a few kilobytes, the packages
// are served from their files. Nothing in it is edited by hand, so it cannot
// drift from the packages it lists. It has one suite (stable) and one
// component (main), for amd64 and arm64:
//
//	dists/stable/InRelease                          Release, clearsigned
//	dists/stable/Release, Release.gpg               Release and its detached signature
//	dists/stable/main/binary-ARCH/Packages{,.gz}    one stanza per package
//	pool/main/p/NAME/NAME_VERSION_ARCH.deb          the packages
//	podium.gpg, podium.asc                          the public key, binary and armored
//
// Every path is looked up in a fixed table built at start: a request for
// anything else, ".." included, is a 404 and touches no file.
package aptrepo

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Architectures are the ones the repository has indexes for, whether or not
// a package of each is present (an empty index is valid, and apt on a node
// of the other architecture then says there is no package for it rather
// than that the repository is broken).
var Architectures = []string{"amd64", "arm64"}

const (
	// Suite is the one suite, and its codename.
	Suite = "stable"
	// Component is the one component.
	Component = "main"
	// maxDebs bounds the packages read from the directory: a coordinator
	// carries the agent for two architectures, and an operator's directory
	// with many times that is a mistake worth stopping at.
	maxDebs = 64
	// maxDebBytes bounds one package file.
	maxDebBytes = 1 << 30
)

// ErrNoPackages means the directory has no .deb files: no repository is
// served, which is not a fault (a coordinator built without them).
var ErrNoPackages = errors.New("no .deb files")

// Repo is a generated repository, ready to serve.
type Repo struct {
	// files are the indexes, signatures and keys, by path under /apt/.
	files map[string][]byte
	// pool are the packages' files on disk, by path under /apt/.
	pool map[string]string
	// modTime is the Release file's Date, which is also the indexes'
	// Last-Modified.
	modTime time.Time
	// Packages are the packages listed, for the log and tests.
	Packages []Package
}

// Package is one package the repository lists.
type Package struct {
	Name, Version, Architecture string
	// Path is where it is served, under /apt/.
	Path string
	// File is the .deb it was read from.
	File string
	Size int64
	// MD5, SHA1 and SHA256 are its hashes in hex.
	MD5, SHA1, SHA256 string
	// stanza is its Packages entry, without the final empty line.
	stanza string
}

// safeName is what a package name, version and architecture may contain
// (deb-control(5); "+", "~", "." and ":" in versions): nothing that could
// leave the pool directory or break the index's syntax.
var (
	safeName    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,127}$`)
	safeVersion = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,127}$`)
)

// Build reads every *.deb in dir and generates the repository, signed by
// signer. date is the Release file's Date; when zero, the newest package's
// modification time is used, so that every replica started from the same
// image generates the same Release text (apt would refuse a Release older
// than the one it saw last, which replicas started at different times could
// otherwise give it).
func Build(dir string, signer *Signer, date time.Time) (*Repo, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoPackages)
	}
	if len(paths) > maxDebs {
		return nil, fmt.Errorf("%s has %d .deb files, more than %d: keep only the podium-agent packages of this coordinator's version there", dir, len(paths), maxDebs)
	}
	sort.Strings(paths)
	r := &Repo{files: map[string][]byte{}, pool: map[string]string{}}
	newest := time.Time{}
	for _, p := range paths {
		pkg, mtime, err := readPackage(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if prev, ok := r.pool[pkg.Path]; ok {
			return nil, fmt.Errorf("%s and %s are the same package (%s %s %s): keep one", prev, p, pkg.Name, pkg.Version, pkg.Architecture)
		}
		r.pool[pkg.Path] = p
		r.Packages = append(r.Packages, pkg)
		if mtime.After(newest) {
			newest = mtime
		}
	}
	if date.IsZero() {
		date = newest
	}
	r.modTime = date.UTC().Truncate(time.Second)

	var indexes []string
	for _, arch := range Architectures {
		var text strings.Builder
		for _, pkg := range r.Packages {
			if pkg.Architecture == arch || pkg.Architecture == "all" {
				text.WriteString(pkg.stanza)
				text.WriteString("\n\n")
			}
		}
		base := Component + "/binary-" + arch + "/Packages"
		r.files["dists/"+Suite+"/"+base] = []byte(text.String())
		gz, err := gzipped([]byte(text.String()))
		if err != nil {
			return nil, err
		}
		r.files["dists/"+Suite+"/"+base+".gz"] = gz
		indexes = append(indexes, base, base+".gz")
	}
	release := r.release(indexes)
	r.files["dists/"+Suite+"/Release"] = release
	if r.files["dists/"+Suite+"/InRelease"], err = signer.clearsign(release); err != nil {
		return nil, fmt.Errorf("sign InRelease: %w", err)
	}
	if r.files["dists/"+Suite+"/Release.gpg"], err = signer.detach(release); err != nil {
		return nil, fmt.Errorf("sign Release.gpg: %w", err)
	}
	r.files["podium.gpg"] = signer.PublicKey()
	if r.files["podium.asc"], err = signer.ArmoredPublicKey(); err != nil {
		return nil, err
	}
	return r, nil
}

// release is the Release file (the Debian repository format's fields) over
// the given indexes, which are in r.files under dists/SUITE/.
func (r *Repo) release(indexes []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Origin: Podium\nLabel: Podium\nSuite: %s\nCodename: %s\n", Suite, Suite)
	fmt.Fprintf(&b, "Date: %s\n", r.modTime.Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Architectures: %s\nComponents: %s\n", strings.Join(Architectures, " "), Component)
	b.WriteString("Description: podium-agent, as served by its coordinator\n")
	for _, h := range []struct {
		name string
		new  func() hash.Hash
	}{{"MD5Sum", md5.New}, {"SHA1", sha1.New}, {"SHA256", sha256.New}} {
		b.WriteString(h.name + ":\n")
		for _, idx := range indexes {
			content := r.files["dists/"+Suite+"/"+idx]
			sum := h.new()
			sum.Write(content)
			fmt.Fprintf(&b, " %s %d %s\n", hex.EncodeToString(sum.Sum(nil)), len(content), idx)
		}
	}
	return b.Bytes()
}

// readPackage reads one .deb: its control fields, hashes and size, and its
// modification time.
func readPackage(path string) (Package, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return Package{}, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Package{}, time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return Package{}, time.Time{}, errors.New("not a regular file")
	}
	if fi.Size() > maxDebBytes {
		return Package{}, time.Time{}, fmt.Errorf("%d bytes, more than %d", fi.Size(), int64(maxDebBytes))
	}
	ctl, err := readControl(io.LimitReader(f, maxDebBytes))
	if err != nil {
		return Package{}, time.Time{}, err
	}
	fields, err := parseControl(ctl)
	if err != nil {
		return Package{}, time.Time{}, err
	}
	pkg := Package{Name: get(fields, "Package"), Version: get(fields, "Version"), Architecture: get(fields, "Architecture"), File: path}
	switch {
	case !safeName.MatchString(pkg.Name):
		return Package{}, time.Time{}, fmt.Errorf("the control file's Package %q is not a package name", pkg.Name)
	case !safeVersion.MatchString(pkg.Version):
		return Package{}, time.Time{}, fmt.Errorf("the control file's Version %q is not a Debian version", pkg.Version)
	case pkg.Architecture != "all" && !slices.Contains(Architectures, pkg.Architecture):
		return Package{}, time.Time{}, fmt.Errorf("the package is for %q; this repository serves %s and all", pkg.Architecture, strings.Join(Architectures, ", "))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Package{}, time.Time{}, err
	}
	m, s1, s256 := md5.New(), sha1.New(), sha256.New()
	n, err := io.Copy(io.MultiWriter(m, s1, s256), f)
	if err != nil {
		return Package{}, time.Time{}, err
	}
	pkg.Size = n
	pkg.MD5, pkg.SHA1, pkg.SHA256 = hex.EncodeToString(m.Sum(nil)), hex.EncodeToString(s1.Sum(nil)), hex.EncodeToString(s256.Sum(nil))
	// The pool name is the one dpkg-name gives, the version without its
	// epoch; the first letter directory is Debian's pool layout.
	version := pkg.Version
	if _, v, ok := strings.Cut(version, ":"); ok {
		version = v
	}
	pkg.Path = fmt.Sprintf("pool/%s/%s/%s/%s_%s_%s.deb", Component, pkg.Name[:1], pkg.Name, pkg.Name, version, pkg.Architecture)

	var st strings.Builder
	for _, f := range fields {
		switch strings.ToLower(f.name) {
		case "filename", "size", "md5sum", "sha1", "sha256":
			continue // the repository's own, below
		}
		st.WriteString(f.name + ": " + f.value + "\n")
	}
	fmt.Fprintf(&st, "Filename: %s\nSize: %d\nMD5sum: %s\nSHA1: %s\nSHA256: %s", pkg.Path, pkg.Size, pkg.MD5, pkg.SHA1, pkg.SHA256)
	pkg.stanza = st.String()
	return pkg, fi.ModTime(), nil
}

// gzipped compresses b with no name or time in the header, so the same
// index gives the same bytes on every replica.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Prefix is where the repository is mounted on the coordinator.
const Prefix = "/apt/"

// ServeHTTP serves GET and HEAD for the repository's paths under Prefix;
// everything else is a 404. No token is asked for: the packages and the
// public key are public, and apt has no way to present one.
func (r *Repo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the apt repository is read-only", http.StatusMethodNotAllowed)
		return
	}
	p, ok := strings.CutPrefix(req.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, req)
		return
	}
	if b, ok := r.files[p]; ok {
		w.Header().Set("Content-Type", contentType(p))
		http.ServeContent(w, req, "", r.modTime, bytes.NewReader(b))
		return
	}
	file, ok := r.pool[p]
	if !ok {
		http.NotFound(w, req)
		return
	}
	f, err := os.Open(file)
	if err != nil {
		http.Error(w, "the package file is unavailable; the coordinator's log says why", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, "the package file is unavailable", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.debian.binary-package")
	http.ServeContent(w, req, "", fi.ModTime(), f)
}

func contentType(p string) string {
	switch {
	case strings.HasSuffix(p, ".gz"):
		return "application/gzip"
	case p == "podium.gpg" || p == "podium.asc":
		return "application/pgp-keys"
	case strings.HasSuffix(p, ".gpg"):
		return "application/pgp-signature"
	}
	return "text/plain; charset=utf-8"
}

// String names the package, for the log.
func (p Package) String() string {
	return p.Name + " " + p.Version + " " + p.Architecture + " (" + strconv.FormatInt(p.Size, 10) + " bytes)"
}
