package identity_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/identity"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

func TestSaveLoadAndModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	want := &identity.Identity{CoordinatorURL: "http://c:8080", NodeID: "n-1", NodeKey: "secret", Labels: []string{"gpu"}}
	if err := identity.Save(dir, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(identity.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v, want 0700", di.Mode().Perm())
	}
	got, err := identity.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.CoordinatorURL != want.CoordinatorURL || got.NodeID != want.NodeID || got.NodeKey != want.NodeKey ||
		strings.Join(got.Labels, ",") != "gpu" {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}

	// Saving again replaces the file and leaves no temporary files behind.
	want.NodeID = "n-2"
	if err := identity.Save(dir, want); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data dir holds %d entries after two saves, want just %s", len(entries), identity.FileName)
	}
	if got, _ := identity.Load(dir); got.NodeID != "n-2" {
		t.Fatalf("node id %q after the second save", got.NodeID)
	}
}

func TestLoadMissingSaysHowToEnroll(t *testing.T) {
	_, err := identity.Load(t.TempDir())
	if !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("error %v, want ErrNotEnrolled", err)
	}
	if !strings.Contains(err.Error(), "podium-agent enroll --coordinator URL --token T") {
		t.Fatalf("error %q does not say how to enroll", err)
	}
}

func TestLoadCorrupt(t *testing.T) {
	for name, content := range map[string]string{
		"not json":   "{node_id: oops",
		"incomplete": `{"node_id": "n-1"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(identity.Path(dir), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := identity.Load(dir)
			if err == nil {
				t.Fatal("a bad identity file loaded")
			}
			if !strings.Contains(err.Error(), identity.Path(dir)) || !strings.Contains(err.Error(), "enroll --force") {
				t.Fatalf("error %q should name the file and say how to re-enroll", err)
			}
		})
	}
}

// enrollServer is a coordinator that only knows how to enroll, with the token
// "good".
type enrollServer struct {
	podiumv1connect.UnimplementedNodeServiceHandler
}

func (enrollServer) Enroll(_ context.Context, req *connect.Request[podiumv1.EnrollRequest]) (*connect.Response[podiumv1.EnrollResponse], error) {
	if req.Msg.GetToken() != "good" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or used token"))
	}
	return connect.NewResponse(&podiumv1.EnrollResponse{
		NodeId:  "n-" + req.Msg.GetHostname(),
		NodeKey: "k-123",
		Labels:  append([]string{"from-token"}, req.Msg.GetLabels()...),
	}), nil
}

func startCoordinator(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewNodeServiceHandler(enrollServer{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEnroll(t *testing.T) {
	url := startCoordinator(t)
	dir := filepath.Join(t.TempDir(), "agent")
	ctx := context.Background()
	p := identity.EnrollParams{DataDir: dir, CoordinatorURL: url + "/", Token: "good", Hostname: "box", Labels: []string{"ssd"}}

	id, err := identity.Enroll(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if id.NodeID != "n-box" || id.NodeKey != "k-123" || id.CoordinatorURL != url || strings.Join(id.Labels, ",") != "from-token,ssd" {
		t.Fatalf("enrolled as %+v", id)
	}
	loaded, err := identity.Load(dir)
	if err != nil || loaded.NodeKey != "k-123" || loaded.Hostname != "box" {
		t.Fatalf("saved identity %+v, %v; want the key and the enrolled hostname", loaded, err)
	}

	p.Hostname = "other"
	if _, err := identity.Enroll(ctx, p); !errors.Is(err, identity.ErrAlreadyEnrolled) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second enroll: %v, want ErrAlreadyEnrolled mentioning --force", err)
	}
	p.Force = true
	if id, err := identity.Enroll(ctx, p); err != nil || id.NodeID != "n-other" {
		t.Fatalf("forced enroll: %+v, %v", id, err)
	}
	if loaded, err := identity.Load(dir); err != nil || loaded.Hostname != "other" {
		t.Fatalf("identity after forced enroll: %+v, %v; want hostname other", loaded, err)
	}
}

func TestEnrollBadToken(t *testing.T) {
	url := startCoordinator(t)
	dir := t.TempDir()
	_, err := identity.Enroll(context.Background(), identity.EnrollParams{DataDir: dir, CoordinatorURL: url, Token: "bad"})
	if err == nil || !strings.Contains(err.Error(), "ask an operator for a new one") {
		t.Fatalf("error %v, want one saying to get a new token", err)
	}
	if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("a failed enrollment left an identity behind: %v", err)
	}
}
