package executor

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The engine's archive is read as untrusted input: entries named outside the
// workspace, or into the artifacts directory (read on the host instead), are
// never written, a hard link is only ever made to a file the extraction
// wrote itself, and a stream cut off in the middle of a file leaves no half
// of it behind to be uploaded as if it were whole. The engine sends nothing
// like this; a tar stream made here is the only way to see it handled.
func TestExtractionRefusesWhatIsNotInTheWorkspace(t *testing.T) {
	sel, err := newSelection(&podiumv1.TaskSpec{Artifacts: []string{"**"}})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	x := &extraction{root: root, sel: sel, links: map[string]string{}}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body[:h.Size]); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "dist/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "dist/ok.txt", Typeflag: tar.TypeReg}, "ok")
	add(&tar.Header{Name: "dist/../../escape.txt", Typeflag: tar.TypeReg}, "no")
	add(&tar.Header{Name: "/etc/cron.d/evil", Typeflag: tar.TypeReg}, "no")
	add(&tar.Header{Name: "dist/.podium/x", Typeflag: tar.TypeReg}, "fine: a .podium elsewhere is an ordinary directory")
	add(&tar.Header{Name: "dist/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")
	add(&tar.Header{Name: "dist/hard-ok", Typeflag: tar.TypeLink, Linkname: "dist/ok.txt"}, "")
	add(&tar.Header{Name: "dist/hard-out", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}, "")
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := x.extract(bytes.NewReader(buf.Bytes()), "/workspace"); err != nil {
		t.Fatal(err)
	}

	// The same from the workspace's root: the artifacts directory's
	// entries are passed over. Then a file cut off half-way.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	add(&tar.Header{Name: "workspace/.podium/artifacts/r.xml", Typeflag: tar.TypeReg}, "read on the host")
	add(&tar.Header{Name: "workspace/big.bin", Typeflag: tar.TypeReg}, strings.Repeat("x", 4096))
	cut := buf.Bytes()[:buf.Len()-1000]
	if err := x.extract(bytes.NewReader(cut), "/"); err == nil || !strings.Contains(err.Error(), "big.bin") {
		t.Fatalf("a stream cut off in a file: %v, want an error naming it", err)
	}

	var got []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"dist/.podium/x", "dist/hard-ok", "dist/ok.txt"}; !slices.Equal(got, want) {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	var reasons []string
	for _, s := range x.skipped {
		reasons = append(reasons, s.Name+": "+s.Reason)
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "dist/link: it is a symbolic link") ||
		!strings.Contains(reasons[1], "dist/hard-out: it is a hard link to ../../etc/shadow") {
		t.Fatalf("skipped %q, want the symbolic link and the hard link out of the stream", reasons)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escape.txt")); err == nil {
		t.Fatal("an entry with .. was written outside the extraction's directory")
	}
}
