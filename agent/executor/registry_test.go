package executor_test

import (
	"context"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/registrytest"
)

// registryEnv is an executor on a private engine that may pull from a
// registry of the test's own (plain HTTP, basic auth), and from deadHost,
// where nothing listens.
type registryEnv struct {
	*privateEnv
	reg      *registrytest.Registry
	deadHost string
}

func setupRegistry(t *testing.T) *registryEnv {
	t.Helper()
	reg := registrytest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p := setupPrivateWith(t, dockertest.PrivateConfig{InsecureRegistries: []string{reg.Host, dead}})
	return &registryEnv{privateEnv: p, reg: reg, deadHost: dead}
}

// login is the registry's login as an assignment carries it.
func (r *registryEnv) login() *podiumv1.RegistryAuth {
	return &podiumv1.RegistryAuth{Host: r.reg.Host, Username: r.reg.Username, Password: r.reg.Password}
}

// run runs spec with the registry logins auths and waits for its end.
func (r *registryEnv) run(t *testing.T, spec *podiumv1.TaskSpec, auths ...*podiumv1.RegistryAuth) (*recorder, *podiumv1.StatusChange) {
	t.Helper()
	rec := newRecorder()
	e := &env{image: dockertest.Image}
	a := e.assign(t, spec)
	a.RegistryAuths = auths
	done, err := r.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 2*time.Minute)
	return rec, rec.final(t, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt})
}

func catMarker(image, pull string) *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{Image: image, Pull: pull, Command: []string{"cat", registrytest.MarkerPath}}
}

func wantFailed(t *testing.T, st *podiumv1.StatusChange, wants ...string) {
	t.Helper()
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("final status %v, want FAILED", st)
	}
	for _, w := range wants {
		if !strings.Contains(st.GetReason(), w) {
			t.Errorf("reason %q does not say %q", st.GetReason(), w)
		}
	}
}

// TestPrivateRegistryImages runs tasks from a real registry behind basic
// auth on one private engine: each subtest pushes its own repository, so
// none finds another's image on the node.
func TestPrivateRegistryImages(t *testing.T) {
	t.Parallel()
	r := setupRegistry(t)

	// The image is pulled with the login for its registry, and only that
	// one: another registry's login, listed first, never reaches it. The
	// pull's progress reaches the task's log as notes.
	t.Run("runs with the login of its registry and no other", func(t *testing.T) {
		// Marked: an image whose config the engine has already (the one
		// it built) is not downloaded, and has no progress to show.
		ref := r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/app:1", "private")
		other := &podiumv1.RegistryAuth{Host: "registry.example.com", Username: "someone-else", Password: "other-registry-password"}
		rec, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"echo", "hello from a private image"}}, other, r.login())
		if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("final status %v, want SUCCEEDED", st)
		}
		if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "hello from a private image\n" {
			t.Fatalf("stdout %q", got)
		}
		if users := r.reg.Users(); !slices.Equal(users, []string{r.reg.Username}) {
			t.Fatalf("the registry saw the user names %q; want only its own login's %q", users, r.reg.Username)
		}
		progress := regexp.MustCompile(`^pulling ` + regexp.QuoteMeta(ref) + `: [0-9.]+ (B|kB|MB|GB) / [0-9.]+ (B|kB|MB|GB)$`)
		notes := rec.notes()
		if !slices.ContainsFunc(notes, progress.MatchString) || !slices.Contains(notes, "pulled "+ref) {
			t.Fatalf("notes %q; want a progress note like \"pulling %s: 1.2 MB / 1.2 MB\" and \"pulled %s\"", notes, ref, ref)
		}
	})

	t.Run("without a login fails as unauthorized, naming podium registry login", func(t *testing.T) {
		ref := r.reg.Push(t, r.pe.Client(), dockertest.Image, "team/locked:1")
		_, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}})
		wantFailed(t, st, ref, "the registry "+r.reg.Host+" wants credentials and none are stored", "podium registry login "+r.reg.Host)
	})

	t.Run("with a wrong password fails as unauthorized", func(t *testing.T) {
		ref := r.reg.Push(t, r.pe.Client(), dockertest.Image, "team/wrong:1")
		bad := r.login()
		bad.Password = "not-the-password"
		_, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}}, bad)
		wantFailed(t, st, ref, "refused the credentials stored for it", "podium registry login "+r.reg.Host)
	})

	t.Run("a tag the registry lacks fails as not found", func(t *testing.T) {
		r.reg.Push(t, r.pe.Client(), dockertest.Image, "team/tags:1")
		ref := r.reg.Ref("team/tags:2")
		_, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}}, r.login())
		wantFailed(t, st, ref, "was not found in the registry "+r.reg.Host)
	})

	t.Run("an unreachable registry fails saying so", func(t *testing.T) {
		ref := r.deadHost + "/team/app:1"
		_, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Command: []string{"true"}})
		wantFailed(t, st, ref, "the registry "+r.deadHost+" could not be reached")
	})

	// if-not-present keeps the node's copy of a re-pushed tag; always picks
	// the new content up.
	t.Run("pull always picks up a re-pushed tag", func(t *testing.T) {
		ref := r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/moving:1", "first")
		for _, step := range []struct{ pull, marker, want string }{
			{"", "", "first"}, // the default for a tag other than latest: if-not-present
			{"if-not-present", "second", "first"},
			{"always", "", "second"},
		} {
			if step.marker != "" {
				r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/moving:1", step.marker)
			}
			rec, st := r.run(t, catMarker(ref, step.pull), r.login())
			if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				t.Fatalf("pull %q: final status %v, want SUCCEEDED", step.pull, st)
			}
			if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != step.want {
				t.Fatalf("pull %q ran the image marked %q, want %q", step.pull, got, step.want)
			}
		}
	})

	// With no policy an image tagged latest is pulled every time, as
	// Kubernetes does.
	t.Run("latest is pulled every time by default", func(t *testing.T) {
		ref := r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/edge:latest", "first")
		for _, want := range []string{"first", "second"} {
			if want != "first" {
				r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/edge:latest", want)
			}
			rec, st := r.run(t, catMarker(ref, ""), r.login())
			if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED || got != want {
				t.Fatalf("final status %v, output %q; want SUCCEEDED with the image marked %q", st, got, want)
			}
		}
	})

	t.Run("never with an image the node lacks fails without pulling", func(t *testing.T) {
		ref := r.reg.Push(t, r.pe.Client(), dockertest.Image, "team/absent:1")
		rec, st := r.run(t, &podiumv1.TaskSpec{Image: ref, Pull: "never", Command: []string{"true"}}, r.login())
		wantFailed(t, st, ref, `is not on this node and the pull policy is "never"`, "--pull if-not-present")
		if notes := rec.notes(); slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, "pulling") }) {
			t.Fatalf("notes %q: the node pulled an image whose policy is never", notes)
		}
	})

	// A sidecar's image is pulled with its own registry's login, under its
	// own policy.
	t.Run("a private sidecar image is pulled with its login", func(t *testing.T) {
		ref := r.reg.PushMarked(t, r.pe.Client(), dockertest.Image, "team/sidecar:1", "sidecar")
		spec := &podiumv1.TaskSpec{Image: dockertest.Image, Pull: "never", Command: []string{"true"},
			Sidecars: []*podiumv1.Sidecar{{Name: "helper", Image: ref, Pull: "always", Command: []string{"sleep", "600"}}}}
		rec, st := r.run(t, spec, r.login())
		if st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("final status %v, want SUCCEEDED", st)
		}
		if notes := rec.notes(); !slices.Contains(notes, "pulled "+ref) {
			t.Fatalf("notes %q; want \"pulled %s\"", notes, ref)
		}
	})
}
