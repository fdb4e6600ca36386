package artifacts_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/taskfile"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCollectNamesSubdirsAndSkips(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "report.txt"), "hello")
	write(t, filepath.Join(dir, "reports", "junit.xml"), "<xml/>")
	write(t, filepath.Join(dir, "a", "b", "c", "deep.bin"), "")
	write(t, filepath.Join(dir, ".hidden"), "dot files count")
	write(t, filepath.Join(dir, "reports", artifacts.TempPrefix+"junit.xml-123"), "half a cop")
	write(t, filepath.Join(dir, "bad\\name"), "x")
	write(t, filepath.Join(dir, "tab\tname"), "x")
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "not yours")
	if err := os.Symlink(outside, filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "reports", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	files, skipped, err := artifacts.Collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []artifacts.File{
		{Name: ".hidden", Path: filepath.Join(dir, ".hidden"), Size: 15},
		{Name: "a/b/c/deep.bin", Path: filepath.Join(dir, "a/b/c/deep.bin"), Size: 0},
		{Name: "report.txt", Path: filepath.Join(dir, "report.txt"), Size: 5},
		{Name: "reports/junit.xml", Path: filepath.Join(dir, "reports/junit.xml"), Size: 6},
	}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("files\n%+v\nwant\n%+v", files, want)
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] = s.Reason
	}
	for name, says := range map[string]string{
		"link-to-file": "symbolic link",
		"link-to-dir":  "symbolic link",
		"reports/pipe": "FIFO",
		"reports/" + artifacts.TempPrefix + "junit.xml-123": "did not finish",
		`bad\name`:  "backslash",
		"tab\tname": "control character",
	} {
		if !strings.Contains(reasons[name], says) {
			t.Errorf("skipped %q with reason %q, want one saying %q", name, reasons[name], says)
		}
	}
	if len(skipped) != 6 {
		t.Errorf("skipped %+v, want exactly the 6 above", skipped)
	}
}

func TestCollectMissingOrEmptyDirectory(t *testing.T) {
	files, skipped, err := artifacts.Collect(filepath.Join(t.TempDir(), "missing"))
	if err != nil || files != nil || skipped != nil {
		t.Fatalf("a missing directory: %v %v %v, want nothing", files, skipped, err)
	}
	files, skipped, err = artifacts.Collect(t.TempDir())
	if err != nil || len(files) != 0 || len(skipped) != 0 {
		t.Fatalf("an empty directory: %v %v %v, want nothing", files, skipped, err)
	}
}

func TestCollectCapsTheNumberOfFiles(t *testing.T) {
	dir := t.TempDir()
	for i := range artifacts.MaxFiles + 3 {
		write(t, filepath.Join(dir, "f", strconv.Itoa(i)), "")
	}
	files, skipped, err := artifacts.Collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != artifacts.MaxFiles || len(skipped) != 3 || !strings.Contains(skipped[0].Reason, "at most") {
		t.Fatalf("%d files, skipped %+v; want %d and 3 skipped", len(files), skipped, artifacts.MaxFiles)
	}
}

func TestPrepareMakesAWorldWritableDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	if err := artifacts.Prepare(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("mode %v (%v), want 0777: the task may run as any user", st.Mode(), err)
	}
}

func TestPublishCopiesAtomicallyUnderItsName(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "out.xml")
	write(t, src, "first")
	if err := artifacts.Publish(dir, src, "reports/junit.xml"); err != nil {
		t.Fatal(err)
	}
	// The copy is the artifact: changing the source afterwards changes
	// nothing, and publishing the name again replaces it.
	write(t, src, "changed")
	if b, _ := os.ReadFile(filepath.Join(dir, "reports", "junit.xml")); string(b) != "first" {
		t.Fatalf("published %q, want %q", b, "first")
	}
	write(t, src, "second")
	if err := artifacts.Publish(dir, src, "reports/junit.xml"); err != nil {
		t.Fatal(err)
	}
	files, skipped, err := artifacts.Collect(dir)
	if err != nil || len(skipped) != 0 || len(files) != 1 || files[0].Name != "reports/junit.xml" || files[0].Size != 6 {
		t.Fatalf("after two publishes: %+v, skipped %+v, %v; want one file of 6 bytes and no temporary left", files, skipped, err)
	}

	for name, says := range map[string]string{
		"../escape": `".." segment`,
		"/abs":      "absolute",
		"":          "empty",
	} {
		if err := artifacts.Publish(dir, src, name); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Publish as %q: %v, want an error saying %q", name, err, says)
		}
	}
	if err := artifacts.Publish(dir, filepath.Join(dir, "nope"), "x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Publish of a missing file: %v", err)
	}
	if err := artifacts.Publish(dir, t.TempDir(), "x"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Publish of a directory: %v", err)
	}
	if err := artifacts.Publish(dir, src, "reports"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Publish over a directory: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("refused publishes left files behind: %v (want only reports/ and %s)", entries, artifacts.PublishedList)
	}
	if names, err := artifacts.Published(dir); err != nil || !reflect.DeepEqual(names, map[string]bool{"reports/junit.xml": true}) {
		t.Errorf("published %v (%v); want only reports/junit.xml, which the refused publishes did not add to", names, err)
	}
}

// CollectWhere takes only what the spec's globs want: anything else, a
// symbolic link included, is passed over without a note and leaves room
// under MaxFiles. The list of published names is never an artifact.
func TestCollectWhere(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "r.xml"), "<r/>")
	write(t, filepath.Join(dir, "sub", "s.xml"), "<s/>")
	write(t, filepath.Join(dir, "x.log"), "log")
	for i := range artifacts.MaxFiles {
		write(t, filepath.Join(dir, "many", strconv.Itoa(i)+".o"), "")
	}
	write(t, filepath.Join(dir, artifacts.PublishedList), "x.log\n")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd.xml")); err != nil {
		t.Fatal(err)
	}
	files, skipped, err := artifacts.CollectWhere(dir, func(name string) bool { return strings.HasSuffix(name, ".xml") })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if !reflect.DeepEqual(names, []string{"r.xml", "sub/s.xml"}) {
		t.Errorf("collected %q, want r.xml and sub/s.xml", names)
	}
	if len(skipped) != 1 || skipped[0].Name != "passwd.xml" || !strings.Contains(skipped[0].Reason, "symbolic link") {
		t.Errorf("skipped %+v, want only the link passwd.xml, which the globs asked for", skipped)
	}
	files, _, err = artifacts.Collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == artifacts.PublishedList {
			t.Errorf("the list of published names was collected as an artifact")
		}
	}
}

// Published reads what Publish recorded, and refuses a list the task swapped
// for a symbolic link to a file of the node.
func TestPublished(t *testing.T) {
	dir := t.TempDir()
	if names, err := artifacts.Published(dir); err != nil || len(names) != 0 {
		t.Fatalf("no list: %v, %v; want nothing", names, err)
	}
	src := filepath.Join(t.TempDir(), "app.tar")
	write(t, src, "tar")
	for _, name := range []string{"app.tar", "dist/app.tar", "app.tar"} {
		if err := artifacts.Publish(dir, src, name); err != nil {
			t.Fatal(err)
		}
	}
	names, err := artifacts.Published(dir)
	if err != nil || !reflect.DeepEqual(names, map[string]bool{"app.tar": true, "dist/app.tar": true}) {
		t.Fatalf("Published = %v, %v", names, err)
	}
	if st, err := os.Stat(filepath.Join(dir, artifacts.PublishedList)); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("the list's mode is %v (%v), want 0666: any user of the task may publish next", st.Mode(), err)
	}

	if err := os.Remove(filepath.Join(dir, artifacts.PublishedList)); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "app.tar\n")
	if err := os.Symlink(secret, filepath.Join(dir, artifacts.PublishedList)); err != nil {
		t.Fatal(err)
	}
	if names, err := artifacts.Published(dir); err == nil || names != nil {
		t.Fatalf("a list that is a symbolic link: %v, %v; want an error", names, err)
	}
}

// A file collected while the task's directory is still the task's may be
// swapped before it is uploaded; File.Open reads a regular file reached
// without a link, or nothing. Nothing is opened that is not a regular file.
func TestOpenRefusesWhatWasSwappedIn(t *testing.T) {
	t.Parallel()
	const secret = "NODE-KEY-91ad-do-not-upload"
	node := filepath.Join(t.TempDir(), "node")
	write(t, filepath.Join(node, "key"), secret)
	write(t, filepath.Join(node, "reports", "junit.xml"), secret)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "key"), "k")
	write(t, filepath.Join(dir, "pipe"), "p")
	write(t, filepath.Join(dir, "reports", "junit.xml"), "<xml/>")
	files, _, err := artifacts.Collect(dir)
	if err != nil || len(files) != 3 {
		t.Fatalf("Collect = %+v, %v", files, err)
	}
	for _, f := range files {
		in, err := f.Open()
		if err != nil {
			t.Fatalf("Open(%s) before any swap: %v", f.Name, err)
		}
		in.Close()
	}
	if err := os.Remove(filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(node, "key"), filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "pipe")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "reports")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(node, "reports"), filepath.Join(dir, "reports")); err != nil {
		t.Fatal(err)
	}
	want := map[string]error{"key": taskfile.ErrSymlink, "pipe": taskfile.ErrNotRegular, "reports/junit.xml": taskfile.ErrSymlink}
	for _, f := range files {
		in, err := f.Open()
		if err == nil {
			in.Close()
		}
		if !errors.Is(err, want[f.Name]) || strings.Contains(fmt.Sprint(err), secret) {
			t.Errorf("Open(%s) after a swap: %v, want %v", f.Name, err, want[f.Name])
		}
	}
}

// What the task leaves as the list of published names is read only if it is
// a regular file of a bounded size.
func TestPublishedRefusesAFIFOOrAHugeList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	list := filepath.Join(dir, artifacts.PublishedList)
	if err := syscall.Mkfifo(list, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := artifacts.Published(dir); !errors.Is(err, taskfile.ErrNotRegular) {
		t.Fatalf("a FIFO as the list: %v, want ErrNotRegular", err)
	}
	src := filepath.Join(t.TempDir(), "app.tar")
	write(t, src, "tar")
	if err := artifacts.Publish(dir, src, "app.tar"); err == nil {
		t.Fatal("Publish recorded its name in a FIFO")
	}
	if err := os.Remove(list); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil { // sparse: a gigabyte of NULs
		t.Fatal(err)
	}
	f.Close()
	if _, err := artifacts.Published(dir); !errors.Is(err, taskfile.ErrTooLarge) {
		t.Fatalf("a 1 GiB list: %v, want ErrTooLarge", err)
	}
}

// A device node a task made (it may, with CAP_MKNOD) is skipped, not opened.
func TestCollectSkipsADevice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mknod(filepath.Join(dir, "zero"), syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	files, skipped, err := artifacts.Collect(dir)
	if err != nil || len(files) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "a device") {
		t.Fatalf("Collect = %+v, %+v, %v; want the device skipped", files, skipped, err)
	}
}
