package e2e

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/podiumhq/podium/internal/testenv/dockertest"
	"github.com/podiumhq/podium/internal/testenv/registrytest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
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
	// downloaded: an image the engine has already shows no progress.
	ref := reg.PushMarked(t, dc, e.image, "team/app:1", "from the registry")
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), ref, image.RemoveOptions{}) })

	r := e.podium("run", "--image", ref, "--", "cat", registrytest.MarkerPath)
	if r.code != 0 || string(r.stdout) != "from the registry" {
		t.Fatalf("exit %d, stdout %q; want 0 and the marker of the pushed image; stderr:\n%s", r.code, r.stdout, r.stderr)
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
