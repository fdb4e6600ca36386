package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"tailscale.com/client/local"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/tailnettest"
)

// enrollStub is a coordinator's enrollment that admits only devices with the
// node tag, as the real one does on a tailnet.
type enrollStub struct {
	podiumv1connect.UnimplementedNodeServiceHandler
	lc *local.Client
}

func (s enrollStub) Enroll(ctx context.Context, req *connect.Request[podiumv1.EnrollRequest]) (*connect.Response[podiumv1.EnrollResponse], error) {
	who, err := s.lc.WhoIs(ctx, req.Peer().Addr)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !slices.Contains(who.Node.Tags, "tag:podium-node") {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("untagged"))
	}
	return connect.NewResponse(&podiumv1.EnrollResponse{NodeId: "node_TSNET", NodeKey: "podium_nk_test"}), nil
}

// `podium-agent enroll --tsnet` joins the tailnet with its own device,
// tagged as a node, and enrolls through it with a coordinator that only the
// tailnet can reach.
func TestEnrollThroughEmbeddedTailnet(t *testing.T) {
	tn := tailnettest.New(t)
	coord := tn.Join(t, "coordinator")
	ln, err := coord.Listen("tcp", ":7070")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := coord.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewNodeServiceHandler(enrollStub{lc: lc}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	code := run([]string{"enroll", "--tsnet", "--tsnet-control-url", tn.ControlURL, "--hostname", "worker",
		"--coordinator", "http://" + coord.IP.String() + ":7070", "--token", "podium_et_test", "--data-dir", dir}, &stdout, &stderr)
	if code != exitOK || strings.TrimSpace(stdout.String()) != "node_TSNET" {
		t.Fatalf("exit %d, stdout %q; stderr:\n%s", code, stdout.String(), stderr.String())
	}
}
