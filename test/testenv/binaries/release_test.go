package binaries

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run runs a command in dir and returns its trimmed stdout.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestReleaseOfACommitNotHere: a commit the repository lacks is an error
// that says how to get it, and in a shallow clone says git fetch --unshallow.
func TestReleaseOfACommitNotHere(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	run(t, repo, "git", "init", "-q")
	for _, m := range []string{"first", "second"} {
		if err := os.WriteFile(filepath.Join(repo, "f"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, repo, "git", "add", "f")
		run(t, repo, "git", "commit", "-q", "-m", m)
	}
	first := run(t, repo, "git", "rev-parse", "HEAD~1")
	shallow := filepath.Join(t.TempDir(), "shallow")
	run(t, repo, "git", "clone", "-q", "--depth", "1", "file://"+repo, shallow)

	_, err := Release(shallow, first)
	if err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Errorf("Release of a commit a shallow clone lacks: %v; want it to say git fetch --unshallow", err)
	}
	const absent = "0123456789abcdef0123456789abcdef01234567"
	_, err = Release(repo, absent)
	if err == nil || !strings.Contains(err.Error(), "not in this repository") || strings.Contains(err.Error(), "unshallow") {
		t.Errorf("Release of a commit a full clone lacks: %v; want it to say the commit is not in the repository, and how to fetch it", err)
	}
}

func TestPreviousRelease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, want string
	}{
		{"# the release before\n\n4967e66a31a54627c08b80c3d63743cf0839e1cd\n", "4967e66a31a54627c08b80c3d63743cf0839e1cd"},
		{"  abc  \n# trailing comment\n", "abc"},
		{"# nothing\n", ""},
		{"abc\ndef\n", ""},
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "packaging"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, PreviousReleaseFile), []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := PreviousRelease(root)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("PreviousRelease of %q: %q, %v; want %q", c.file, got, err, c.want)
		}
	}
}

// TestPreviousReleaseRecorded: this repository's record names one commit.
func TestPreviousReleaseRecorded(t *testing.T) {
	t.Parallel()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	c, err := PreviousRelease(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != 40 || strings.Trim(c, "0123456789abcdef") != "" {
		t.Errorf("%s names %q; want a full commit hash (git rev-parse of the release's tag)", PreviousReleaseFile, c)
	}
}
