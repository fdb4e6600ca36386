package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/nodes"
)

// TestPGLinkRefusesAndCancelsOnceLost drives the link's state by probe
// outcomes: failures shorter than lostAfter change nothing; past it a call in
// flight is cancelled and a new API call is refused 503 (Unavailable) while
// /readyz still goes through; one probe that passes serves calls again.
func TestPGLinkRefusesAndCancelsOnceLost(t *testing.T) {
	p := newPGLink(func() error { return nil }, nodes.NewRegistry(), 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	started := make(chan struct{})
	ended := make(chan error, 1)
	h := p.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/podium.v1.TaskService/Events" {
			close(started)
			<-r.Context().Done()
			ended <- context.Cause(r.Context())
			return
		}
		_, _ = w.Write([]byte("served\n"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	go func() {
		_, _ = http.Post(srv.URL+"/podium.v1.TaskService/Events", "application/json", strings.NewReader("{}"))
	}()
	<-started
	t0 := time.Now()
	p.observe(t0, errors.New("no answer"))
	p.observe(t0.Add(4*time.Second), errors.New("no answer"))
	if code := get("/podium.v1.AdminService/ListNodes"); code != http.StatusOK {
		t.Fatalf("4 s of failed probes: a call was answered %d, want it served", code)
	}
	p.observe(t0.Add(5*time.Second), errors.New("no answer"))
	select {
	case cause := <-ended:
		if cause == nil || !strings.Contains(cause.Error(), "lost Postgres") {
			t.Errorf("the call in flight ended with cause %v, want the link's loss", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight was not cancelled when the link was declared lost")
	}
	if code := get("/podium.v1.AdminService/ListNodes"); code != http.StatusServiceUnavailable {
		t.Errorf("with the link lost a call was answered %d, want 503 (Unavailable)", code)
	}
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("with the link lost /readyz was not passed through (%d)", code)
	}
	p.observe(t0.Add(6*time.Second), nil)
	if code := get("/podium.v1.AdminService/ListNodes"); code != http.StatusOK {
		t.Errorf("after a probe passed a call was answered %d, want it served", code)
	}
}
