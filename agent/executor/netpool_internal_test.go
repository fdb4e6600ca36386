package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The pool network an attempt recorded is read back only from a regular
// file holding a pool network's name: a link (to a file naming some other
// network, or to a device) and anything longer or malformed read as "none",
// so teardown never removes a network the record did not rightly name.
func TestRecordedNetworkReadsOnlyARegularFileWithAPoolName(t *testing.T) {
	t.Parallel()
	const name = poolPrefix + "0123456789ab"
	r := &run{dir: t.TempDir()}
	if err := r.recordNetwork(name); err != nil {
		t.Fatal(err)
	}
	if got := r.recordedNetwork(); got != name {
		t.Fatalf("recorded %q, read back %q", name, got)
	}

	elsewhere := filepath.Join(t.TempDir(), "name")
	if err := os.WriteFile(elsewhere, []byte(name+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for what, prepare := range map[string]func(p string) error{
		"a link to a file naming a pool network": func(p string) error { return os.Symlink(elsewhere, p) },
		"a link to /dev/zero":                    func(p string) error { return os.Symlink("/dev/zero", p) },
		"a directory":                            func(p string) error { return os.Mkdir(p, 0o700) },
		"a name past its length":                 func(p string) error { return os.WriteFile(p, []byte(name+strings.Repeat("f", 1<<20)), 0o600) },
		"another network's name":                 func(p string) error { return os.WriteFile(p, []byte("bridge\n"), 0o600) },
	} {
		r := &run{dir: t.TempDir()}
		if err := prepare(filepath.Join(r.dir, networkFile)); err != nil {
			t.Fatal(err)
		}
		if got := r.recordedNetwork(); got != "" {
			t.Errorf("%s read back as %q, want none", what, got)
		}
	}
}
