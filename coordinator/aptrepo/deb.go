package aptrepo

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// A .deb is an ar archive of three members: debian-binary ("2.0\n"), the
// control tarball and the data tarball (deb(5)). Only the control file in
// the control tarball is read here. The reader is a few dozen lines rather
// than a library: pault.ag/go/debian would bring its own xz and OpenPGP
// packages for the one file needed, and github.com/blakesmith/ar only the ar
// half. The bounds below are far above a real control member's size, so a
// broken or hostile file fails with a message instead of filling memory.
const (
	// maxControlTarBytes bounds the control tarball, compressed or not.
	maxControlTarBytes = 4 << 20
	// maxControlBytes bounds the control file itself.
	maxControlBytes = 256 << 10
	// maxMembers bounds how many ar members are looked at before the
	// control tarball must have turned up (it is the second).
	maxMembers = 8
)

const (
	arMagic      = "!<arch>\n"
	arHeaderSize = 60
)

// errNotDeb marks a file that is not a Debian binary package.
var errNotDeb = errors.New("not a Debian binary package")

// readControl returns the control file of the .deb r.
func readControl(r io.Reader) ([]byte, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return nil, fmt.Errorf("%w: no ar header", errNotDeb)
	}
	sawVersion := false
	for range maxMembers {
		name, size, err := readArHeader(br)
		if err != nil {
			return nil, err
		}
		member := io.LimitReader(br, size)
		switch {
		case name == "debian-binary":
			v, err := io.ReadAll(io.LimitReader(member, 16))
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(string(v), "2.") {
				return nil, fmt.Errorf("%w: format %q, want 2.x", errNotDeb, strings.TrimSpace(string(v)))
			}
			sawVersion = true
		case strings.HasPrefix(name, "control.tar"):
			if !sawVersion {
				return nil, fmt.Errorf("%w: %s comes before debian-binary", errNotDeb, name)
			}
			if size > maxControlTarBytes {
				return nil, fmt.Errorf("%s is %d bytes, more than %d", name, size, maxControlTarBytes)
			}
			return controlFromTar(name, member)
		}
		// Members are padded to an even length.
		if _, err := io.Copy(io.Discard, member); err != nil {
			return nil, err
		}
		if size%2 == 1 {
			if _, err := br.Discard(1); err != nil {
				return nil, err
			}
		}
	}
	return nil, fmt.Errorf("%w: no control.tar member among the first %d", errNotDeb, maxMembers)
}

// readArHeader reads one ar member header: its name (without the GNU "/"
// terminator) and its size.
func readArHeader(r io.Reader) (string, int64, error) {
	var h [arHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", 0, fmt.Errorf("%w: truncated ar member header: %v", errNotDeb, err)
	}
	if string(h[58:60]) != "`\n" {
		return "", 0, fmt.Errorf("%w: bad ar member header", errNotDeb)
	}
	name := strings.TrimSuffix(strings.TrimRight(string(h[0:16]), " "), "/")
	size, err := strconv.ParseInt(strings.TrimRight(string(h[48:58]), " "), 10, 64)
	if err != nil || size < 0 {
		return "", 0, fmt.Errorf("%w: ar member %q has a bad size", errNotDeb, name)
	}
	return name, size, nil
}

// controlFromTar decompresses the control tarball by its member name's
// suffix and returns its ./control. xz (dpkg-deb's default) is not read:
// the standard library has no xz, and Podium's packages are built by nfpm,
// whose control tarball is gzip; `dpkg-deb -Zgzip` makes one too.
func controlFromTar(name string, r io.Reader) ([]byte, error) {
	var tr io.Reader
	switch name {
	case "control.tar":
		tr = r
	case "control.tar.gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		tr = zr
	case "control.tar.zst":
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(maxControlTarBytes*4), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		tr = zr
	default:
		return nil, fmt.Errorf("the control member is %s, which this coordinator cannot read: build the package with nfpm "+
			"(control.tar.gz) or with dpkg-deb -Zgzip", name)
	}
	t := tar.NewReader(io.LimitReader(tr, maxControlTarBytes*4))
	for {
		h, err := t.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s has no control file", name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "control" || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > maxControlBytes {
			return nil, fmt.Errorf("the control file is %d bytes, more than %d", h.Size, maxControlBytes)
		}
		return io.ReadAll(io.LimitReader(t, maxControlBytes))
	}
}

// field is one field of a control stanza, its value as written (continuation
// lines included, without the final newline).
type field struct {
	name, value string
}

// parseControl splits a control file (deb-control(5)) into its fields, in
// order. It refuses what would corrupt a Packages index if copied into one:
// more than one stanza, a repeated field, a line that is neither a field nor
// a continuation.
func parseControl(b []byte) ([]field, error) {
	var out []field
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimRight(string(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))), "\n"), "\n") {
		switch {
		case line == "" || strings.TrimSpace(line) == "":
			return nil, errors.New("the control file has more than one stanza (an empty line)")
		case line[0] == ' ' || line[0] == '\t':
			if len(out) == 0 {
				return nil, errors.New("the control file starts with a continuation line")
			}
			out[len(out)-1].value += "\n" + line
		case line[0] == '#':
			// A comment: dpkg ignores it too.
		default:
			name, value, ok := strings.Cut(line, ":")
			if !ok || name == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("the control file has a line that is not a field: %q", line)
			}
			if seen[strings.ToLower(name)] {
				return nil, fmt.Errorf("the control file has the field %s twice", name)
			}
			seen[strings.ToLower(name)] = true
			out = append(out, field{name: name, value: strings.TrimSpace(value)})
		}
	}
	return out, nil
}

// get is the value of the named field (names are case-insensitive), or "".
func get(fields []field, name string) string {
	for _, f := range fields {
		if strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}
