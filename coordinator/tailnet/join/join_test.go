package join

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tailscale.com/client/local"
)

// Without a tailscaled on the machine, the host transport says so and names
// the way out, instead of serving on an address nobody can reach.
// The client is pointed at a socket nobody listens on, so the test says the
// same whether or not this machine runs tailscaled.
func TestHostWithoutTailscaled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lc := &local.Client{Socket: filepath.Join(t.TempDir(), "tailscaled.sock"), UseSocketOnly: true}
	_, err := host(ctx, lc, 0, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "tailscale status") || !strings.Contains(err.Error(), "--transport tailnet") {
		t.Fatalf("Host without tailscaled: %v, want an error saying what to do", err)
	}
}

// The embedded transport needs a state directory: without one the replica
// would be a new device after every restart.
func TestEmbeddedNeedsStateDir(t *testing.T) {
	_, err := Embedded(context.Background(), EmbeddedConfig{})
	if err == nil || !strings.Contains(err.Error(), "--ts-state-dir") {
		t.Fatalf("Embedded without a state dir: %v", err)
	}
}

func TestCertDomain(t *testing.T) {
	if d := certDomain(true, []string{"c.tail1.ts.net"}); d != "c.tail1.ts.net" {
		t.Errorf("certDomain = %q", d)
	}
	if d := certDomain(false, []string{"c.tail1.ts.net"}); d != "" {
		t.Errorf("without MagicDNS there is no certificate, got %q", d)
	}
	if d := certDomain(true, nil); d != "" {
		t.Errorf("without cert domains there is no certificate, got %q", d)
	}
}
