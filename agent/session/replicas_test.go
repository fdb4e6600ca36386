package session_test

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// A node whose enrolled coordinator is down reaches one given with
// --coordinator, and one from the replica list an earlier process kept.
func TestDialsConfiguredAndKeptReplicasWhenTheEnrolledOneIsDown(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]session.Config{
		"--coordinator": {Coordinators: []string{selfURL}},
		"kept list":     {Replicas: []string{selfURL}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg.MaxTasks = 1
			cfg.CoordinatorURL = deadURL(t)
			f := startWith(t, newRunner(), cfg, nil)
			cn := f.coord.next(t)
			if h := cn.hello(t); h.GetNodeId() != "n-1" {
				t.Fatalf("hello from %q", h.GetNodeId())
			}
		})
	}
}

// The list the coordinator pushes when replicas join or leave replaces the
// node's and is handed to OnReplicas to keep; a repeat or an empty list is
// not.
func TestPushedReplicasAreKept(t *testing.T) {
	t.Parallel()
	kept := make(chan []string, 10)
	f := startWith(t, newRunner(), session.Config{MaxTasks: 1, OnReplicas: func(u []string) { kept <- u }}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	ack := helloAck()
	ack.GetHelloAck().Replicas = []string{"a:1"}
	cn.push(ack)
	if got := wait.Recv(t, 20*time.Second, "the HelloAck's replicas to be kept", kept); !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("kept %v after HelloAck", got)
	}
	push := func(addrs ...string) {
		cn.push(&podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Replicas{Replicas: &podiumv1.Replicas{Addresses: addrs}}})
	}
	push("a:1")
	push()
	push("a:1", "http://b:2", "a:1")
	if got := wait.Recv(t, 20*time.Second, "the pushed replicas to be kept", kept); !slices.Equal(got, []string{"http://a:1", "http://b:2"}) {
		t.Fatalf("kept %v after the push; want a and b once each (the repeat and the empty list are not kept)", got)
	}
}
