package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The fake coordinator sees every caller as alice on her laptop.
func (f *fake) WhoAmI(context.Context, *connect.Request[podiumv1.WhoAmIRequest]) (*connect.Response[podiumv1.WhoAmIResponse], error) {
	return connect.NewResponse(&podiumv1.WhoAmIResponse{Kind: podiumv1.CallerKind_CALLER_KIND_PERSON,
		Login: "alice@example.com", Device: "alice-laptop.tail1234.ts.net", DeviceId: "nXYZ", Transport: "tailnet"}), nil
}

// rekeyRequests holds the last RekeyNodeRequest each fake received.
var rekeyRequests sync.Map // *fake → *podiumv1.RekeyNodeRequest

// RekeyNode knows node_A only.
func (f *fake) RekeyNode(_ context.Context, req *connect.Request[podiumv1.RekeyNodeRequest]) (*connect.Response[podiumv1.RekeyNodeResponse], error) {
	rekeyRequests.Store(f, req.Msg)
	if req.Msg.NodeId != "node_A" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no node "+req.Msg.NodeId))
	}
	return connect.NewResponse(&podiumv1.RekeyNodeResponse{Token: "podium_et_rekeyed", NodeId: "node_A",
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}), nil
}

func TestWhoami(t *testing.T) {
	f := newFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "whoami"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	out := cli.out.String()
	for _, want := range []string{"kind:", "person", "login:", "alice@example.com", "device:", "alice-laptop.tail1234.ts.net (nXYZ)",
		"transport:", "tailnet"} {
		if !strings.Contains(out, want) {
			t.Errorf("whoami should show %q:\n%s", want, out)
		}
	}
	if h := f.recorded()[0].auth; h != "" {
		t.Errorf("whoami sent %q with no token configured", h)
	}
}

func TestNodeRekey(t *testing.T) {
	f := newFake(t)
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rekey", "--ttl", "30m", "node_A"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if got := cli.out.String(); got != "podium_et_rekeyed\n" {
		t.Errorf("stdout %q, want only the token", got)
	}
	if e := cli.errOut.String(); !strings.Contains(e, "podium-agent enroll --coordinator "+f.url()+" --token TOKEN --force") ||
		!strings.Contains(e, "becomes node node_A") {
		t.Errorf("stderr should say how to use the token:\n%s", e)
	}
	if req, _ := rekeyRequests.Load(f); req.(*podiumv1.RekeyNodeRequest).TtlSeconds != 1800 {
		t.Errorf("ttl %v, want 1800 s", req)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rekey", "node_Z"); code != exitUsage || !strings.Contains(cli.errOut.String(), "no node node_Z") {
		t.Errorf("unknown node: exit %d, stderr %q", code, cli.errOut)
	}
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rekey"); code != exitUsage {
		t.Errorf("no node: exit %d, want %d", code, exitUsage)
	}
}
