package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"1GiB": 1 << 30, "1G": 1 << 30, "200MiB": 200 << 20, "64KiB": 64 << 10, "1048576": 1 << 20, "5B": 5, "2TiB": 2 << 40,
	} {
		var f sizeFlag
		if err := f.Set(in); err != nil || f.n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, f.n, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1.5GiB", "1GB", "MiB", "lots", "9999999999TiB"} {
		var f sizeFlag
		if err := f.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, f.n)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1GiB", 200 << 20: "200MiB", 1000: "1000", 3 << 10: "3KiB"} {
		if got := (&sizeFlag{n: n}).String(); got != want {
			t.Errorf("String(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestHealthcheck(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready {
			http.Error(w, "not ready: Postgres does not answer", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	}))
	defer srv.Close()
	var stderr bytes.Buffer
	if code := run([]string{"healthcheck", "--url", srv.URL}, &stderr); code != 0 {
		t.Fatalf("healthy coordinator: exit %d: %s", code, stderr.String())
	}
	ready = false
	stderr.Reset()
	if code := run([]string{"healthcheck", "--url", srv.URL}, &stderr); code != 1 || !strings.Contains(stderr.String(), "Postgres") {
		t.Fatalf("unready coordinator: exit %d: %s", code, stderr.String())
	}
	srv.Close()
	stderr.Reset()
	if code := run([]string{"healthcheck", "--url", srv.URL}, &stderr); code != 1 {
		t.Fatalf("no coordinator: exit %d: %s", code, stderr.String())
	}
}
