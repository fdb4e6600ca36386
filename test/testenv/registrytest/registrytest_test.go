package registrytest_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"

	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/registrytest"
)

// pull pulls ref into the engine with auth ("" for none) and returns the
// error the pull ended with, read from its progress stream too.
func pull(ctx context.Context, pe *dockertest.PrivateEngine, ref, auth string) error {
	rc, err := pe.Client().ImagePull(ctx, ref, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		return err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	if i := strings.Index(string(b), `"error"`); i >= 0 {
		return &streamErr{string(b[i:])}
	}
	return nil
}

type streamErr struct{ s string }

func (e *streamErr) Error() string { return e.s }

// The registry holds what Push gives it only for a client with its
// credentials: a real engine, told it may use plain HTTP for it, is refused
// without them and pulls the image with them; PushMarked under the same tag
// makes the tag name other content.
func TestRegistryServesPushedImagesBehindBasicAuth(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t)
	pe := dockertest.StartPrivateEngineWith(t, dockertest.PrivateConfig{InsecureRegistries: []string{reg.Host}})
	ref := reg.Push(t, pe.Client(), dockertest.Image, "team/app:1")
	if ref != reg.Host+"/team/app:1" {
		t.Fatalf("Push returned %q, want %s/team/app:1", ref, reg.Host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if err := pull(ctx, pe, ref, ""); err == nil {
		t.Fatal("the engine pulled the image without credentials")
	} else if !strings.Contains(err.Error(), "unauthorized") && !strings.Contains(err.Error(), "no basic auth credentials") {
		t.Fatalf("pull without credentials: %v; want it refused as unauthorized", err)
	}
	if reg.Refused() == 0 {
		t.Fatal("the registry refused nothing, yet the pull without credentials failed")
	}
	auth, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: reg.Username, Password: reg.Password, ServerAddress: reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	if err := pull(ctx, pe, ref, auth); err != nil {
		t.Fatalf("pull with credentials: %v", err)
	}
	first, err := pe.Client().ImageInspect(ctx, ref)
	if err != nil {
		t.Fatalf("the pulled image is not in the engine: %v", err)
	}

	reg.PushMarked(t, pe.Client(), dockertest.Image, "team/app:1", "second")
	if err := pull(ctx, pe, ref, auth); err != nil {
		t.Fatalf("pull of the re-pushed tag: %v", err)
	}
	second, err := pe.Client().ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || len(second.RootFS.Layers) != len(first.RootFS.Layers)+1 {
		t.Fatalf("after PushMarked the tag names %s with %d layers; want another image than %s (%d layers) with one layer more",
			second.ID, len(second.RootFS.Layers), first.ID, len(first.RootFS.Layers))
	}
}
