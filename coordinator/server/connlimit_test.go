package server

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/tlstest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// No more connections than the bound are served at once, across listeners
// and through TLS; the others wait their turn and are served as earlier ones
// close.
func TestConnectionBound(t *testing.T) {
	t.Parallel()
	const bound, clients = 2, 6
	ca := tlstest.New(t)
	certs, err := loadCertFiles(ca.CertFile, ca.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	limit := newConnLimit(bound)
	var mu sync.Mutex
	inside, most := 0, 0
	release := make(chan struct{})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			<-release
			mu.Lock()
			inside--
			mu.Unlock()
		}),
		ConnState: limit.connState,
	}
	var urls []string
	for _, useTLS := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + ln.Addr().String()
		if useTLS {
			url = "https://" + ln.Addr().String()
			ln = tls.NewListener(ln, &tls.Config{GetCertificate: certs.get})
		}
		urls = append(urls, url)
		ln = limit.listener(ln) // as the replica does, over TLS
		go func() { _ = srv.Serve(ln) }()
	}
	defer srv.Close()

	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	done := make(chan error, clients)
	for i := range clients {
		go func() {
			res, err := hc.Get(urls[i%2])
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			done <- err
		}()
	}
	for range clients {
		wait.For(t, 30*time.Second, "a request to be inside the handler", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return inside > 0
		})
		release <- struct{}{}
		if err := wait.Recv(t, 30*time.Second, "a request to be answered", done); err != nil {
			t.Fatal(err)
		}
	}
	if most > bound {
		t.Errorf("%d connections were served at once; the bound is %d", most, bound)
	}
}

// A renewed certificate is served from the next handshake on, without a
// restart.
func TestCertificateReloads(t *testing.T) {
	t.Parallel()
	first, second := tlstest.New(t), tlstest.New(t)
	certs, err := loadCertFiles(first.CertFile, first.KeyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	issuer := func() *x509.Certificate {
		t.Helper()
		c, err := certs.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	if _, err := issuer().Verify(x509.VerifyOptions{Roots: first.Pool}); err != nil {
		t.Fatalf("before renewal: %v", err)
	}
	later := time.Now().Add(time.Hour)
	for src, dst := range map[string]string{second.CertFile: first.CertFile, second.KeyFile: first.KeyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dst, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := issuer().Verify(x509.VerifyOptions{Roots: second.Pool}); err != nil {
		t.Fatalf("after renewal: %v", err)
	}
}

// The body read deadline is the body's: once a request's body has been read
// to its end, a handler may answer for as long as it likes (as Events does
// for a followed task) without the connection's deadline ending it, over
// HTTP/1.1, where the deadline is the connection's.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	read := make(chan time.Time, 1)
	release := make(chan struct{})
	var ctxErr error
	srv := httptest.NewServer(bodyLimits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		read <- time.Now()
		<-release
		ctxErr = r.Context().Err()
		_, _ = w.Write([]byte("late answer"))
	}), timeout))
	defer srv.Close()
	type answer struct {
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := http.Post(srv.URL+"/podium.v1.TaskService/Events", "application/connect+proto", strings.NewReader("x"))
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		got <- answer{string(b), err}
	}()
	bodyRead := wait.Recv(t, 30*time.Second, "the handler to read the body", read)
	wait.For(t, 30*time.Second, "the body's deadline to be well past", func() bool { return time.Since(bodyRead) > 10*timeout })
	close(release)
	a := wait.Recv(t, 30*time.Second, "the answer", got)
	if a.err != nil || a.body != "late answer" || ctxErr != nil {
		t.Errorf("an answer after the body's deadline: %q, %v (the handler's context: %v)", a.body, a.err, ctxErr)
	}
}
