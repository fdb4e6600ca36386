// Package registrytest serves a real image registry inside the test process:
// go-containerregistry's pkg/registry (the Docker Registry HTTP API V2 a
// Docker engine pulls from), behind HTTP basic auth, on a TCP port of
// 127.0.0.1. No registry is reachable on the machines Podium is built on,
// and the registry:2 image cannot be fetched there either, so this is what
// private-registry tests pull from.
//
// The registry serves plain HTTP. An engine pulls over plain HTTP from the
// registries in its insecure-registries, and 127.0.0.0/8 is one by default,
// so the machine's engine pulls from it as it is; a test with a private
// engine lists Registry.Host in dockertest.PrivateConfig.InsecureRegistries
// all the same, so that it does not rest on that default. Production code
// never imports this package.
package registrytest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is a running registry. Every request must carry Username and
// Password as basic auth; one without them is answered 401 with a Basic
// challenge, which is how the Docker engine learns to send them.
type Registry struct {
	// Host is the registry's host:port as image references name it,
	// "127.0.0.1:PORT".
	Host     string
	Username string
	Password string

	srv *http.Server
	// refused counts requests answered 401.
	refused atomic.Int64
	mu      sync.Mutex
	users   []string // user names of requests with basic auth, first seen first
}

// Start serves a registry until the test ends. Its user name and password
// are fixed per test ("podium-test" and a password naming the test's port),
// which is all a test needs to tell "with" from "without" credentials.
func Start(t testing.TB) *Registry {
	t.Helper()
	return start(t, true)
}

// StartOpen serves a registry that asks for no credentials (Username and
// Password are empty), as a public one: the machine's own engine pulls
// from it without being told of it, since every engine takes 127.0.0.0/8
// for an insecure registry.
func StartOpen(t testing.TB) *Registry {
	t.Helper()
	return start(t, false)
}

func start(t testing.TB, withAuth bool) *Registry {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registrytest: listen: %v", err)
	}
	r := &Registry{Host: ln.Addr().String()}
	if withAuth {
		r.Username = "podium-test"
		r.Password = fmt.Sprintf("pw-%d-%d", ln.Addr().(*net.TCPAddr).Port, time.Now().UnixNano())
	}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if ok {
			r.sawUser(u)
		}
		if withAuth && (!ok || subtle.ConstantTimeCompare([]byte(u), []byte(r.Username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(r.Password)) != 1) {
			r.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="podium-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		inner.ServeHTTP(w, req)
	}), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("registrytest: serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.srv.Shutdown(ctx)
		<-done
	})
	return r
}

func (r *Registry) sawUser(u string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.users, u) {
		r.users = append(r.users, u)
	}
}

// Users are the user names requests have sent as basic auth so far, each
// once: a test checks that no other registry's login reached this one.
func (r *Registry) Users() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.users)
}

// Refused is how many requests the registry has answered 401 so far.
func (r *Registry) Refused() int64 { return r.refused.Load() }

// Ref is the reference of repoTag ("team/app:1") in this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// Push copies the image src from the engine (dockertest's test image, say)
// to repoTag in this registry and returns the reference a pull names.
func (r *Registry) Push(t testing.TB, engine *client.Client, src, repoTag string) string {
	t.Helper()
	return r.push(t, engine, src, repoTag, "")
}

// PushMarked is Push with one more layer on top, holding the file
// MarkerPath with marker as its content: pushed again under the same tag
// with another marker, the tag names different content, and a task that
// cats MarkerPath shows which one it ran.
func (r *Registry) PushMarked(t testing.TB, engine *client.Client, src, repoTag, marker string) string {
	t.Helper()
	return r.push(t, engine, src, repoTag, marker)
}

// MarkerPath is the file PushMarked adds to an image.
const MarkerPath = "/podium-marker"

func (r *Registry) push(t testing.TB, engine *client.Client, src, repoTag, marker string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img, err := fromEngine(ctx, t.TempDir(), engine, src)
	if err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	if marker != "" {
		layer, err := fileLayer(MarkerPath[1:], marker)
		if err != nil {
			t.Fatalf("registrytest: a layer with the marker: %v", err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatalf("registrytest: add the marker layer: %v", err)
		}
	}
	ref := r.Ref(repoTag)
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatalf("registrytest: %q: %v", ref, err)
	}
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	if err := remote.Write(tag, img, remote.WithAuth(auth), remote.WithContext(ctx)); err != nil {
		t.Fatalf("registrytest: push %s: %v", ref, err)
	}
	return ref
}

// fromEngine saves src from the engine into a tarball in dir (docker save's
// format) and reads it as an image.
func fromEngine(ctx context.Context, dir string, engine *client.Client, src string) (v1.Image, error) {
	rc, err := engine.ImageSave(ctx, []string{src})
	if err != nil {
		return nil, fmt.Errorf("save %s from the engine: %w", src, err)
	}
	defer rc.Close()
	path := filepath.Join(dir, "image.tar")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("save %s from the engine: %w", src, err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	tag, err := name.NewTag(src)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", src, err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		return nil, fmt.Errorf("read the saved %s: %w", src, err)
	}
	return img, nil
}

// fileLayer is a layer holding one file.
func fileLayer(path, content string) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(tw, content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
