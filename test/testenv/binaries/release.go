package binaries

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// PreviousReleaseFile is where the repository records the commit of the
// release before this tree, relative to its root: the binaries a rolling
// upgrade test starts from. Cutting a release updates it (docs/operations.md,
// "Upgrades").
const PreviousReleaseFile = "packaging/previous-release"

// commands are the binaries a release is made of, as `make build` names them.
var commands = []string{"podium", "podium-agent", "podium-coordinator", "podium-runner"}

// Root is the root of the git checkout the working directory is in.
func Root() (string, error) {
	out, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("find the repository's root (the tests that build a release need a git checkout): %w", err)
	}
	return out, nil
}

// PreviousRelease is the commit recorded in PreviousReleaseFile under root:
// its one line that is neither blank nor a # comment.
func PreviousRelease(root string) (string, error) {
	path := filepath.Join(root, PreviousReleaseFile)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the previous release's commit: %w", err)
	}
	defer f.Close()
	var commits []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			commits = append(commits, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(commits) != 1 {
		return "", fmt.Errorf("%s names %d commits (%v), want exactly one line with the previous release's commit", path, len(commits), commits)
	}
	return commits[0], nil
}

// Release builds the binaries of commit (anything git rev-parse takes) of
// the repository at root, with the flags `make build` used at that commit
// (its own scripts/ldflags.sh, CGO_ENABLED=0, -trimpath), stamped with
// `git describe --tags --always` of the commit, and returns the directory
// that holds them. They are cached under the user's cache directory
// (~/.cache/podium/releases/FULL-HASH/), so only the first call for a commit
// compiles anything; a lock there lets test binaries that run at once build
// it once. A commit the repository does not have is an error that says how
// to fetch it (a shallow clone has no history to build from).
func Release(root, commit string) (string, error) {
	full, err := git(root, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		shallow, _ := git(root, "rev-parse", "--is-shallow-repository")
		if shallow == "true" {
			return "", fmt.Errorf("commit %s is not in this repository, which is a shallow clone: run `git fetch --unshallow` (the upgrade tests build the previous release from its commit)", commit)
		}
		return "", fmt.Errorf("commit %s is not in this repository: fetch it (`git fetch origin %s`, or `git fetch --tags`); the upgrade tests build the previous release from its commit", commit, commit)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory for the release binaries: %w", err)
	}
	releases := filepath.Join(cache, "podium", "releases")
	dir := filepath.Join(releases, full)
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(releases, 0o755); err != nil {
		return "", fmt.Errorf("make the release cache: %w", err)
	}
	unlock, err := lock(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(dir) { // built by whoever held the lock before
		return dir, nil
	}
	// What a build of this commit that was killed left behind.
	left, _ := filepath.Glob(filepath.Join(releases, full+".*-*"))
	for _, l := range left {
		_ = os.RemoveAll(l)
	}
	if err := buildRelease(root, full, releases, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// complete reports whether dir holds every binary of a release.
func complete(dir string) bool {
	for _, c := range commands {
		if fi, err := os.Stat(filepath.Join(dir, c)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// lock takes an exclusive flock on path, waiting for it.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the release cache's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// buildRelease extracts commit's tree (git archive) into a temporary
// directory beside dir, builds it there into another, and renames that one
// to dir, so that dir is either absent or whole.
func buildRelease(root, commit, releases, dir string) error {
	src, err := os.MkdirTemp(releases, commit+".src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	extract := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	extract.Stdin = pipe
	var archiveErr, extractErr bytes.Buffer
	archive.Stderr, extract.Stderr = &archiveErr, &extractErr
	if err := extract.Start(); err != nil {
		return fmt.Errorf("run tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = extract.Wait()
		return fmt.Errorf("git archive %s: %w: %s", commit, err, archiveErr.String())
	}
	if err := extract.Wait(); err != nil {
		return fmt.Errorf("extract git archive %s: %w: %s", commit, err, extractErr.String())
	}

	describe, err := git(root, "describe", "--tags", "--always", commit)
	if err != nil {
		return err
	}
	ldflags, err := releaseLDFlags(src, describe)
	if err != nil {
		return err
	}
	out, err := os.MkdirTemp(releases, commit+".bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out) // a no-op once renamed
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + "/"}
	for _, c := range commands {
		args = append(args, "./cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Dir = src
	// GOWORK=off: the release's own go.mod decides, as it
	// did when it was built from its own checkout.
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "binaries: building release %s (%s) into %s, once\n", describe, commit, dir)
	if err := build.Run(); err != nil {
		return fmt.Errorf("build release %s (go %v in %s): %w", commit, args, src, err)
	}
	if err := os.Rename(out, dir); err != nil {
		return fmt.Errorf("put the release's binaries in the cache: %w", err)
	}
	return nil
}

// releaseLDFlags are the -ldflags the release's own scripts/ldflags.sh
// prints for version; a release from before that script stamps the version
// the way it does.
func releaseLDFlags(src, version string) (string, error) {
	script := filepath.Join(src, "scripts", "ldflags.sh")
	if _, err := os.Stat(script); errors.Is(err, os.ErrNotExist) {
		return "-s -w -X github.com/podiumhq/podium/internal/version.Version=" + version, nil
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "VERSION="+version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run the release's scripts/ldflags.sh: %w: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// git runs git in dir ("" for the working directory) and returns its
// trimmed stdout.
func git(dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
