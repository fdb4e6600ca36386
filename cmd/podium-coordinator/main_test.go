package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/internal/taskspec"
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

// Thresholds that cannot work are refused at start, before anything is
// touched, by flag or by variable, and the error says what to change.
func TestThresholdsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		says []string
	}{
		{[]string{"--offline-after", "20s"}, nil, []string{"--offline-after 20s is not longer than --unreachable-after 30s", "raise --offline-after or lower --unreachable-after"}},
		{[]string{"--unreachable-after", "5m"}, nil, []string{"--offline-after 2m0s is not longer than --unreachable-after 5m0s"}},
		{[]string{"--unreachable-after", "10s"}, nil, []string{"--unreachable-after 10s is not longer than --heartbeat-interval 10s", "raise --unreachable-after", "lower --heartbeat-interval"}},
		{[]string{"--heartbeat-interval", "1m"}, nil, []string{"--unreachable-after 30s is not longer than --heartbeat-interval 1m0s"}},
		{nil, map[string]string{"PODIUM_UNREACHABLE_AFTER": "1s", "PODIUM_OFFLINE_AFTER": "5s", "PODIUM_HEARTBEAT_INTERVAL": "1s"}, []string{"--unreachable-after 1s is not longer than --heartbeat-interval 1s"}},
		{nil, map[string]string{"PODIUM_UNREACHABLE_AFTER": "3s", "PODIUM_OFFLINE_AFTER": "3s", "PODIUM_HEARTBEAT_INTERVAL": "1s"}, []string{"--offline-after 3s is not longer than --unreachable-after 3s"}},
		{[]string{"--ack-deadline", "0"}, nil, []string{"--ack-deadline 0: want a positive duration"}},
		{[]string{"--write-off-after", "-1s"}, nil, []string{"must all be positive"}},
		{nil, map[string]string{"PODIUM_ACK_DEADLINE": "soon"}, []string{`PODIUM_ACK_DEADLINE="soon": want a positive duration`}},
	} {
		t.Run(strings.Join(c.args, " ")+fmt.Sprint(c.env), func(t *testing.T) {
			// No database: the thresholds are refused before one is needed.
			t.Setenv("PODIUM_DATABASE_URL", "")
			for _, k := range []string{"PODIUM_UNREACHABLE_AFTER", "PODIUM_OFFLINE_AFTER", "PODIUM_ACK_DEADLINE", "PODIUM_WRITE_OFF_AFTER", "PODIUM_HEARTBEAT_INTERVAL"} {
				t.Setenv(k, c.env[k])
			}
			var stderr bytes.Buffer
			if code := run(append([]string{"serve"}, c.args...), &stderr); code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, stderr.String())
			}
			for _, want := range c.says {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("says %q; want it to say %q", stderr.String(), want)
				}
			}
		})
	}
}

// --archive-after out of its bounds is refused before anything starts, saying
// what it wants; so is a PODIUM_LOG_ARCHIVE that is not a boolean.
func TestArchiveFlagsBounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--archive-after", "0s"}, "want a positive duration"},
		{[]string{"serve", "--archive-after", "-5m"}, "want a positive duration"},
		{[]string{"serve", "--archive-after", "9000h"}, "--archive-after 9000h0m0s: want 0 to 8760h0m0s"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.says) {
			t.Errorf("%v: exit %d, %q; want 2 saying %q", tc.args, code, stderr.String(), tc.says)
		}
	}
	t.Setenv("PODIUM_LOG_ARCHIVE", "sometimes")
	var stderr bytes.Buffer
	if code := run([]string{"serve"}, &stderr); code != 2 || !strings.Contains(stderr.String(), `PODIUM_LOG_ARCHIVE="sometimes": want true or false`) {
		t.Errorf("PODIUM_LOG_ARCHIVE=sometimes: exit %d, %q", code, stderr.String())
	}
}

// Retention flags take days and years, and a bad value, by flag or by
// variable, is refused at start naming the flag and the accepted form.
func TestRetentionFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		says []string
	}{
		{[]string{"--retain-tasks", "90"}, nil, []string{"-retain-tasks", "has no unit", `"90d"`}},
		{[]string{"--retain-logs", "soon"}, nil, []string{"-retain-logs", "not a duration", `"1y"`}},
		{[]string{"--retain-artifacts", "30s"}, nil, []string{"--retain-artifacts 30s: want 1m to 100y"}},
		{[]string{"--retain-audit", "200y"}, nil, []string{"-retain-audit", "more than 100 years"}},
		{[]string{"--retention-every", "1ms"}, nil, []string{"--retention-every 1ms: want 10ms to 24h"}},
		{nil, map[string]string{"PODIUM_RETAIN_TASKS": "1.5d"}, []string{"PODIUM_RETAIN_TASKS", "not a duration"}},
		{nil, map[string]string{"PODIUM_RETENTION_EVERY": "often"}, []string{`PODIUM_RETENTION_EVERY="often"`}},
	} {
		t.Run(strings.Join(c.args, " ")+fmt.Sprint(c.env), func(t *testing.T) {
			t.Setenv("PODIUM_DATABASE_URL", "")
			for _, k := range []string{"PODIUM_RETAIN_TASKS", "PODIUM_RETAIN_LOGS", "PODIUM_RETAIN_ARTIFACTS", "PODIUM_RETAIN_AUDIT", "PODIUM_RETENTION_EVERY"} {
				t.Setenv(k, c.env[k])
			}
			var stderr bytes.Buffer
			if code := run(append([]string{"serve"}, c.args...), &stderr); code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, stderr.String())
			}
			for _, want := range c.says {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("says %q; want it to say %q", stderr.String(), want)
				}
			}
		})
	}
	// Good values parse into the config the server gets.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	t.Setenv("PODIUM_RETAIN_AUDIT", "2y")
	var c retention.Config
	if err := bindFlags(fs, retentionFlags(&c)); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--retain-tasks", "30d", "--retain-logs", "36h", "--retention-every", "5m"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	want := retention.Config{Tasks: 30 * taskspec.Day, Logs: 36 * time.Hour, Audit: 2 * taskspec.Year, Every: 5 * time.Minute}
	if c != want {
		t.Errorf("config %+v, want %+v", c, want)
	}
}

// --queue-timeout is a spec's queue_timeout for tasks that give none: one a
// spec could not give is refused before anything starts, saying what it
// wants.
func TestQueueTimeoutFlagRefused(t *testing.T) {
	for _, arg := range []string{"-1m", "9000h", "1500ms"} {
		var stderr bytes.Buffer
		if code := run([]string{"serve", "--queue-timeout", arg}, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), "want 0 (none) or a whole number of seconds up to 8760h0m0s (a year)") {
			t.Errorf("--queue-timeout %s: exit %d, %q; want 2 saying what it wants", arg, code, stderr.String())
		}
	}
}
