package transport_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/transport"
	"github.com/podiumhq/podium/test/testenv/tailnettest"
)

// An agent with its own embedded tailnet device reaches a coordinator that
// only the tailnet can reach, over HTTP/2 without TLS, whether the dialer is
// given to the client or travels in the context.
func TestEmbeddedTailnetDialing(t *testing.T) {
	tn := tailnettest.New(t)
	coord := tn.Join(t, "coordinator")
	ln, err := coord.Listen("tcp", ":7070")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agentNet, err := transport.JoinTailnet(ctx, transport.TailnetConfig{
		StateDir: t.TempDir(), Hostname: "worker", ControlURL: tn.ControlURL, Tags: []string{"tag:podium-node"},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer agentNet.Close()
	url := "http://" + coord.IP.String() + ":7070/"
	get := func(ctx context.Context, opts ...transport.Option) string {
		t.Helper()
		c, err := transport.NewClient(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if got := get(ctx, transport.WithDial(agentNet.Dial)); got != "HTTP/2.0" {
		t.Errorf("WithDial: the coordinator saw %q, want HTTP/2.0", got)
	}
	if got := get(transport.ContextWithDialer(ctx, agentNet.Dial)); got != "HTTP/2.0" {
		t.Errorf("ContextWithDialer: the coordinator saw %q, want HTTP/2.0", got)
	}
}
