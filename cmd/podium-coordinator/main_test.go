package main

import (
	"bytes"
	"io"
	"log/slog"
	"net"
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

	// A coordinator serving TLS on loopback: its certificate names its
	// public host, so the probe beside it does not verify it.
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ready\n"))
	}))
	defer tlsSrv.Close()
	stderr.Reset()
	if code := run([]string{"healthcheck", "--url", tlsSrv.URL}, &stderr); code != 0 {
		t.Fatalf("healthy coordinator over TLS: exit %d: %s", code, stderr.String())
	}
}

// The profiler listens on loopback only, and says so; on loopback it serves.
func TestDebugListen(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bad := range []string{"0.0.0.0:7071", "10.1.2.3:7071", "example.com:7071", "7071"} {
		if _, err := serveDebug(bad, log); err == nil {
			t.Errorf("--debug-listen %s was accepted", bad)
		} else if !strings.Contains(err.Error(), "--debug-listen") {
			t.Errorf("--debug-listen %s: %v does not name the flag", bad, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := serveDebug(addr, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	res, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline: %s", res.Status)
	}
}
