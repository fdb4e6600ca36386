package taskfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podiumhq/podium/test/testenv/wait"
)

const secret = "NODE-KEY-5f0c1a9e-do-not-leak"

// modes are the ways a name can be resolved and reopened: every test runs in
// each, so the fallbacks a node without openat2 or /proc takes hold the same
// line as the usual path.
var modes = []struct {
	name         string
	walk, noProc bool
}{
	{"openat2", false, false},
	{"walk", true, false},
	{"openat2-no-proc", false, true},
	{"walk-no-proc", true, true},
}

func open(t *testing.T, dir string, walk, noProc bool) *Dir {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d.walk, d.noProc = walk, noProc
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostile lays out what a task could leave in its directory, next to a file
// of the node's that holds a secret.
func hostile(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	node := filepath.Join(t.TempDir(), "node.json")
	writeFile(t, node, secret+"\n")
	writeFile(t, filepath.Join(dir, "plain"), "42\n")
	writeFile(t, filepath.Join(dir, "sub", "deeper", "file"), "nested")
	writeFile(t, filepath.Join(dir, "big"), strings.Repeat("x", 1000))
	for link, target := range map[string]string{
		"to-secret":       node,
		"to-zero":         "/dev/zero",
		"to-dir":          filepath.Dir(node),
		"to-plain":        "plain", // a relative link, staying inside
		"sub/to-secret":   node,
		"link-to-sub-dir": "sub",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "a-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReadFile: only a regular file reached without a link is read, within
// the bound; everything else is refused, at once, and no error quotes what
// the file holds.
func TestReadFile(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			dir := hostile(t)
			d := open(t, dir, m.walk, m.noProc)
			for _, tc := range []struct {
				name string
				want string // content, when it is read
				err  error
			}{
				{"plain", "42\n", nil},
				{"sub/deeper/file", "nested", nil},
				{"big", "", ErrTooLarge},
				{"to-secret", "", ErrSymlink},
				{"to-zero", "", ErrSymlink},
				{"to-dir", "", ErrSymlink},
				{"to-plain", "", ErrSymlink},
				{"sub/to-secret", "", ErrSymlink},
				{"link-to-sub-dir/deeper/file", "", ErrSymlink},
				{"fifo", "", ErrNotRegular},
				{"a-dir", "", ErrNotRegular},
				{"missing", "", fs.ErrNotExist},
				{"../" + filepath.Base(dir) + "/plain", "", ErrName},
				{"sub/../plain", "", ErrName},
				{"./plain", "", ErrName},
				{"/etc/hostname", "", ErrName},
				{"", "", ErrName},
			} {
				got, err := d.ReadFile(tc.name, 999)
				switch {
				case tc.err == nil && (err != nil || string(got) != tc.want):
					t.Errorf("ReadFile(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
				case tc.err != nil && !errors.Is(err, tc.err):
					t.Errorf("ReadFile(%q) = %q, %v; want %v", tc.name, got, err, tc.err)
				case err != nil && strings.Contains(err.Error(), secret):
					t.Errorf("ReadFile(%q): the error quotes the file: %v", tc.name, err)
				}
			}
			if got, err := d.ReadFile("big", 1000); err != nil || len(got) != 1000 {
				t.Errorf("a file exactly at the bound: %d bytes, %v", len(got), err)
			}
		})
	}
}

// A FIFO is refused without waiting for a writer: the open that would block
// is never made.
func TestFIFODoesNotBlock(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, hostile(t), m.walk, m.noProc)
			done := make(chan error, 1)
			go func() {
				_, err := d.ReadFile("fifo", 64)
				done <- err
			}()
			if err := wait.Recv(t, 5*time.Second, "ReadFile of a FIFO to return", done); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") {
				t.Fatalf("ReadFile of a FIFO: %v, want ErrNotRegular naming a FIFO", err)
			}
		})
	}
}

// Device nodes are refused without being opened: /dev/zero itself (through
// a directory the agent opened), and one a task with CAP_MKNOD made.
func TestDevicesAreNotOpened(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, "/dev", m.walk, m.noProc)
			if _, err := d.ReadFile("zero", 64); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "device") {
				t.Fatalf("ReadFile(/dev/zero): %v, want ErrNotRegular naming a device", err)
			}
			dir := t.TempDir()
			err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
			if err != nil {
				t.Skipf("cannot make a device node here (%v); /dev/zero above covers devices", err)
			}
			td := open(t, dir, m.walk, m.noProc)
			if _, err := td.Open("null"); !errors.Is(err, ErrNotRegular) {
				t.Fatalf("Open of a device node a task made: %v, want ErrNotRegular", err)
			}
		})
	}
}

func TestLstatAndReadDirDoNotFollow(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, hostile(t), m.walk, m.noProc)
			st, err := d.Lstat("to-secret")
			if err != nil || st.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("Lstat of a link: %v, %v; want the link itself", st, err)
			}
			if st, err := d.Lstat("sub/deeper/file"); err != nil || st.Size() != 6 || !st.Mode().IsRegular() {
				t.Errorf("Lstat of a nested file: %v, %v", st, err)
			}
			if _, err := d.Lstat("link-to-sub-dir/deeper"); !errors.Is(err, ErrSymlink) {
				t.Errorf("Lstat through a link: %v, want ErrSymlink", err)
			}
			entries, err := d.ReadDir(".")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if got := strings.Join(names, " "); got != "a-dir big fifo link-to-sub-dir plain sub to-dir to-plain to-secret to-zero" {
				t.Errorf("ReadDir(.) = %s", got)
			}
			if entries, err := d.ReadDir("sub"); err != nil || len(entries) != 2 {
				t.Errorf("ReadDir(sub) = %v, %v; want deeper and to-secret", entries, err)
			}
			if _, err := d.ReadDir("to-dir"); err == nil {
				t.Error("ReadDir followed a link to a directory of the node")
			}
			if _, err := d.ReadDir("link-to-sub-dir/deeper"); !errors.Is(err, ErrSymlink) {
				t.Errorf("ReadDir through a link: %v, want ErrSymlink", err)
			}
		})
	}
}

// WriteFile replaces what the task planted under the name, never writing
// through it, and leaves no temporary file behind when it fails.
func TestWriteFileReplacesWhatWasPlanted(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			victim := filepath.Join(t.TempDir(), "victim")
			writeFile(t, victim, "untouched")
			if err := os.Symlink(victim, filepath.Join(dir, "msg")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "a-dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "a-dir", "x"), "keeps the directory non-empty")
			d := open(t, dir, m.walk, m.noProc)
			for _, name := range []string{"msg", "fifo", "new"} {
				if err := d.WriteFile(name, []byte("hello"), 0o666); err != nil {
					t.Fatalf("WriteFile(%s): %v", name, err)
				}
				if b, err := d.ReadFile(name, 64); err != nil || string(b) != "hello" {
					t.Errorf("%s after WriteFile: %q, %v", name, b, err)
				}
				if st, err := d.Lstat(name); err != nil || st.Mode() != 0o666 {
					t.Errorf("%s mode %v (%v), want exactly 0666 whatever the umask", name, st.Mode(), err)
				}
			}
			if b, _ := os.ReadFile(victim); string(b) != "untouched" {
				t.Errorf("WriteFile wrote through a planted link: the node's file holds %q", b)
			}
			if err := d.WriteFile("a-dir", []byte("x"), 0o644); err == nil {
				t.Error("WriteFile replaced a directory")
			}
			for _, bad := range []string{"a-dir/x", "../x", ""} {
				if err := d.WriteFile(bad, []byte("x"), 0o644); !errors.Is(err, ErrName) {
					t.Errorf("WriteFile(%q): %v, want ErrName", bad, err)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".taskfile-") {
					t.Errorf("a temporary file was left behind: %s", e.Name())
				}
			}
		})
	}
}

// The directory the agent names must not itself be a link.
func TestOpenDirRefusesALink(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if d, err := OpenDir(link); err == nil {
		_ = d.Close()
		t.Fatal("OpenDir followed a link")
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing"), "x", 1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile in a missing directory: %v, want ErrNotExist", err)
	}
}
