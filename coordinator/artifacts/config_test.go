package artifacts

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, host string
		tls, ok  bool
		flagTLS  bool
	}{
		{in: "minio:9000", host: "minio:9000", flagTLS: true, tls: true, ok: true},
		{in: "minio:9000", host: "minio:9000", flagTLS: false, tls: false, ok: true},
		{in: "http://minio:9000", host: "minio:9000", flagTLS: true, tls: false, ok: true},
		{in: "https://s3.example.com", host: "s3.example.com", tls: true, ok: true},
		{in: "https://s3.example.com/", host: "s3.example.com", tls: true, ok: true},
		{in: "https://s3.example.com/bucket"},
		{in: "ftp://minio:9000"},
		{in: "minio:9000/bucket"},
	} {
		host, tls, err := parseEndpoint(tc.in, tc.flagTLS)
		if (err == nil) != tc.ok || (tc.ok && (host != tc.host || tls != tc.tls)) {
			t.Errorf("parseEndpoint(%q, %v) = %q, %v, %v", tc.in, tc.flagTLS, host, tls, err)
		}
	}
}

// A configuration that cannot work is refused at start with what to change,
// and no configuration at all is a coordinator without artifacts, not an error.
func TestNewChecksConfig(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	s, err := New(Config{}, nil, log)
	if err != nil || !errors.Is(s.Ready(), ErrNotConfigured) {
		t.Fatalf("no endpoint: %v, ready %v; want a service that says artifacts are not configured", err, s.Ready())
	}
	for _, tc := range []struct {
		cfg  Config
		says string
	}{
		{Config{Endpoint: "minio:9000"}, "--s3-bucket"},
		{Config{Endpoint: "minio:9000", Bucket: "b", AccessKey: "k"}, "both --s3-access-key and --s3-secret-key"},
		{Config{Endpoint: "minio:9000", Bucket: "b", PartSize: 1 << 20}, "below the 5 MiB"},
		{Config{Endpoint: "minio:9000", Bucket: "b", MaxSize: 1 << 40}, "raise the part size"},
		{Config{Endpoint: "http://minio:9000/x", Bucket: "b"}, "with no path"},
	} {
		if _, err := New(tc.cfg, nil, log); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.says)
		}
	}
	s, err = New(Config{Endpoint: "minio:9000", Bucket: "b"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Config(); c.MaxSize != 1<<30 || c.URLExpiry.Minutes() != 15 || c.UploadGrace.Minutes() != 10 || c.Region != "us-east-1" {
		t.Errorf("defaults = %+v", c)
	}
	if err := s.Ready(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not been checked yet") {
		t.Errorf("before the first check, Ready() = %v", err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 6 << 20: "6.0 MiB", 1 << 30: "1.0 GiB", 1536 << 30: "1.5 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
