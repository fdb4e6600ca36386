package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/registrytest"
)

// A task whose image the node pulls from a registry shows the pull's
// progress on podium run's stderr ("→ pulling IMAGE: 1.2 MB / 1.2 MB") and
// runs the image it pulled.
func TestPullProgressReachesPodiumRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := registrytest.StartOpen(t)
	dc := dockertest.Client(t)
	// Marked, so that its config is new to the engine and its layers are
	// downloaded: an image the engine has already shows no progress. The
	// mark is 3 MB of this run's own random text: the engine reports a
	// layer's download only past 512 kB of it, and a layer another test's
	// image brought (the same bytes) would be "already there".
	random := make([]byte, 1536<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	marker := hex.EncodeToString(random)
	sum := sha256.Sum256([]byte(marker))
	ref := reg.PushMarked(t, dc, e.image, "team/app:1", marker)
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), ref, image.RemoveOptions{}) })

	r := e.podium("run", "--image", ref, "--", "sha256sum", registrytest.MarkerPath)
	if want := hex.EncodeToString(sum[:]) + "  " + registrytest.MarkerPath + "\n"; r.code != 0 || string(r.stdout) != want {
		t.Fatalf("exit %d, stdout %q; want 0 and the checksum of the pushed image's marker; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	progress := regexp.MustCompile(`(?m)^→ pulling ` + regexp.QuoteMeta(ref) + `: [0-9.]+ (B|kB|MB|GB) / [0-9.]+ (B|kB|MB|GB)$`)
	if !progress.Match(r.stderr) {
		t.Fatalf("stderr has no line like \"→ pulling %s: 1.2 MB / 1.2 MB\":\n%s", ref, r.stderr)
	}
}

// A private image the node has no login for fails at podium run with 125
// and a reason that says the registry wants credentials and how to give
// them.
func TestPrivateImageWithoutLoginFailsWith125(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := registrytest.Start(t)
	ref := reg.Push(t, dockertest.Client(t), e.image, "team/locked:1")

	r := e.podium("run", "--image", ref, "--", "true")
	if r.code != 125 {
		t.Fatalf("exit %d, want 125; stderr:\n%s", r.code, r.stderr)
	}
	want := []string{ref, "the registry " + reg.Host + " wants credentials and none are stored", "podium registry login " + reg.Host}
	for _, w := range want {
		if !bytes.Contains(r.stderr, []byte(w)) {
			t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
		}
	}
	tk := e.task(r.taskID(t))
	if tk.State != podiumv1.TaskState_TASK_STATE_FAILED || !strings.Contains(tk.Reason, want[1]) {
		t.Fatalf("task %v, want failed with the reason %q", tk, want[1])
	}
}

// podiumStdin is podium with stdin.
func (e *env) podiumStdin(stdin string, args ...string) result {
	e.t.Helper()
	cmd := e.podiumCmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("podium %v: %v", args, err)
	}
	return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: code}
}

// The whole of a registry login, on the real binaries: after `podium
// registry login HOST --username U --password-stdin` a private image on HOST
// runs (the node pulled it with that login); `podium registry ls` shows the
// host and user and never the password; after `podium registry rm HOST` a
// pull of it (pull: always, so the engine's copy is not enough) fails again
// with 125 naming `podium registry login`. Before the login it fails the
// same way.
func TestRegistryLoginLetsAPrivateImageRun(t *testing.T) {
	t.Parallel()
	e := newEnvOpts(t, coordtest.Options{SecretsKeyFile: coordtest.KeyFile(t)}, nil)
	reg := registrytest.Start(t)
	dc := dockertest.Client(t)
	ref := reg.PushMarked(t, dc, e.image, "team/private:1", "private and pulled")
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), ref, image.RemoveOptions{}) })
	wantNoLogin := func(when string) {
		t.Helper()
		r := e.podium("run", "--pull", "always", "--image", ref, "--", "cat", registrytest.MarkerPath)
		if r.code != 125 || !bytes.Contains(r.stderr, []byte("podium registry login "+reg.Host)) {
			t.Fatalf("%s: exit %d, want 125 naming `podium registry login %s`; stderr:\n%s", when, r.code, reg.Host, r.stderr)
		}
	}
	wantNoLogin("before the login")

	login := e.podiumStdin(reg.Password+"\n", "registry", "login", reg.Host, "--username", reg.Username, "--password-stdin")
	if login.code != 0 {
		t.Fatalf("podium registry login: exit %d; stderr:\n%s", login.code, login.stderr)
	}
	ls := e.podium("registry", "ls")
	if ls.code != 0 || !bytes.Contains(ls.stdout, []byte(reg.Host)) || !bytes.Contains(ls.stdout, []byte(reg.Username)) ||
		bytes.Contains(ls.stdout, []byte(reg.Password)) || bytes.Contains(ls.stderr, []byte(reg.Password)) {
		t.Fatalf("podium registry ls: exit %d, want the host and user and no password:\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
	r := e.podium("run", "--pull", "always", "--image", ref, "--", "cat", registrytest.MarkerPath)
	if r.code != 0 || string(r.stdout) != "private and pulled" {
		t.Fatalf("after the login: exit %d, stdout %q; want 0 and the private image's marker; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if got := reg.Users(); len(got) != 1 || got[0] != reg.Username {
		t.Fatalf("the registry saw the users %q, want only %q", got, reg.Username)
	}
	if strings.Contains(e.alog.String(), reg.Password) {
		t.Fatal("the agent's log holds the registry password")
	}

	if rm := e.podium("registry", "rm", reg.Host); rm.code != 0 {
		t.Fatalf("podium registry rm: exit %d; stderr:\n%s", rm.code, rm.stderr)
	}
	wantNoLogin("after registry rm")
}
