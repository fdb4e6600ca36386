package transport

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://c:8080":       "http://c:8080",
		"http://c:8080/":      "http://c:8080",
		"https://c.ts.net/p/": "https://c.ts.net/p",
	} {
		got, err := NormalizeURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, hint := range map[string]string{
		"":               "no coordinator URL",
		"coordinator:80": "write http://coordinator:80",
		"ftp://c":        "must start with http://",
		"http://":        "names no host",
	} {
		_, err := NormalizeURL(in)
		if err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("NormalizeURL(%q) error %v, want one saying %q", in, err, hint)
		}
	}
}

// TestCleartextHTTP2 checks that an http:// client speaks HTTP/2 from the
// first byte to a server that accepts unencrypted HTTP/2, which is what the
// bidirectional node stream needs.
func TestCleartextHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "HTTP/2.0" {
		t.Fatalf("server saw %q, want HTTP/2.0", body)
	}
}
