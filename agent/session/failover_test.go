package session_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/agent/session"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// serveCoordinator serves another test coordinator until the test ends.
func serveCoordinator(t *testing.T) (*coordinator, string) {
	t.Helper()
	c := &coordinator{conns: make(chan *conn, 10)}
	mux := http.NewServeMux()
	mux.Handle(podiumv1connect.NewNodeServiceHandler(c))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// A node whose stream ends after its HelloAck tries the next replica the
// HelloAck listed, not the one that just dropped it: when that replica died,
// going back to it first would cost the whole fleet a refused dial and one
// more backoff step before it reaches the survivor.
func TestStreamLossMovesToTheNextReplica(t *testing.T) {
	t.Parallel()
	b, bURL := serveCoordinator(t)
	f := startWith(t, newRunner(), session.Config{MaxTasks: 1}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	ack := helloAck()
	ack.GetHelloAck().Replicas = []string{bURL}
	cn.push(ack)
	cn.heartbeat(t) // the node has taken the HelloAck and serves the stream
	cn.end <- connect.NewError(connect.CodeUnavailable, errors.New("replica going away"))

	// Replica A is still up and would take the node back; the node goes on
	// to B all the same.
	select {
	case next := <-b.conns:
		if h := next.hello(t); h.GetNodeId() != "n-1" {
			t.Fatalf("hello at the next replica from %q", h.GetNodeId())
		}
	case <-f.coord.conns:
		t.Fatal("the node went back to the replica that dropped its stream before trying the next one")
	case <-time.After(patience):
		t.Fatalf("the node opened no stream anywhere within %s", patience)
	}
}
