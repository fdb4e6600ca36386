package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/podiumhq/podium/test/testenv/tlstest"
)

// Plain http:// goes to this machine and to the tailnet; anywhere else it is
// refused at start, naming the way out, unless the operator allows it or the
// agent's own tailnet device carries the connection. (Tailnet addresses are
// allowed only out the tailnet's interface: see
// TestPlaintextOnlyThroughTheTailnetInterface, which has one.)
func TestCheckPlaintext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ok := range []string{
		"http://127.0.0.1:7070", "http://[::1]:7070", "http://localhost:7070",
		"http://coordinator.tail1234.ts.net:7070",
		"https://192.0.2.1", "https://example.com", "https://100.80.0.9",
	} {
		if err := CheckPlaintext(ctx, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://192.0.2.1:7070", "http://10.0.0.1:7070", "http://100.128.0.1", "http://[2001:db8::1]:7070"} {
		err := CheckPlaintext(ctx, bad)
		if !errors.Is(err, ErrPlaintext) || !strings.Contains(err.Error(), "--insecure-plaintext") || !strings.Contains(err.Error(), "https://") {
			t.Errorf("%s: %v, want a refusal naming https:// and --insecure-plaintext", bad, err)
		}
		if err := CheckPlaintext(ContextWithSecurity(ctx, Security{InsecurePlaintext: true}), bad); err != nil {
			t.Errorf("%s with InsecurePlaintext: %v", bad, err)
		}
		tailnetDial := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") }
		if err := CheckPlaintext(ContextWithDialer(ctx, tailnetDial), bad); err != nil {
			t.Errorf("%s through the agent's own tailnet device: %v", bad, err)
		}
	}
}

// Every connection is checked too, at the address actually dialled, so a URL
// learned later (a replica's) cannot send the node key in clear text either;
// nothing is sent to it.
func TestPlaintextRefusedAtDial(t *testing.T) {
	t.Parallel()
	c, err := NewClient("http://192.0.2.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get("http://192.0.2.1:7070")
	if !errors.Is(err, ErrPlaintext) {
		t.Errorf("http:// to 192.0.2.1: %v, want ErrPlaintext", err)
	}
	// On loopback it is served.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c, err = NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	if _, err := c.Do(req); errors.Is(err, ErrPlaintext) {
		t.Errorf("http:// to loopback: %v", err)
	}
}

// An https:// coordinator whose certificate a private CA signed is reached
// with that CA in the context's Security, over HTTP/2 (the node stream needs
// it); without it the handshake fails on the unknown authority.
func TestPrivateCA(t *testing.T) {
	t.Parallel()
	ca := tlstest.New(t)
	cert, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ContextWithSecurity(context.Background(), Security{RootCAs: pool})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if body, _ := io.ReadAll(res.Body); string(body) != "HTTP/2.0" {
		t.Errorf("server saw %q, want HTTP/2.0", body)
	}

	c, err = NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(srv.URL)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("without the CA: %v, want an unknown authority", err)
	}
}
