package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"tailscale.com/tsnet"
)

// TailnetConfig configures the agent's own embedded tailnet device, for
// machines where Tailscale is not installed (or must not be shared with the
// agent). By default the agent uses the host's tailscaled and needs none of
// this.
type TailnetConfig struct {
	// StateDir keeps the device's keys, so that the node stays the same
	// Tailscale device across restarts: the coordinator binds the node to
	// that device, and a new one would be refused until the node is rekeyed.
	StateDir string
	// Hostname is the device's name on the tailnet.
	Hostname string
	// AuthKey joins the device the first time; later starts use StateDir.
	// Use a key that carries the node tag (tag:podium-node).
	AuthKey string
	// ControlURL is the coordination server; empty means Tailscale's.
	ControlURL string
	// Tags are the ACL tags the device asks for. The coordinator admits a
	// node only from a device with the node tag.
	Tags   []string
	Logger *slog.Logger
}

// Tailnet is the agent's embedded tailnet device.
type Tailnet struct {
	srv *tsnet.Server
}

// JoinTailnet brings up the embedded device and waits until it is on the
// tailnet (or ctx ends: without an auth key or stored state, someone must
// open the login URL it logs).
func JoinTailnet(ctx context.Context, cfg TailnetConfig) (*Tailnet, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("the embedded tailnet device needs a state directory (--tsnet-state-dir)")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	srv := &tsnet.Server{
		Dir: cfg.StateDir, Hostname: cfg.Hostname, AuthKey: cfg.AuthKey, ControlURL: cfg.ControlURL,
		AdvertiseTags: cfg.Tags,
		UserLogf: func(format string, args ...any) {
			log.Info("tailscale: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
		},
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		srv.Logf = func(format string, args ...any) {
			log.Debug("tsnet: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
		}
	}
	st, err := srv.Up(ctx)
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("join the tailnet as %s: %w (check --tsnet-auth-key or PODIUM_TSNET_AUTHKEY, and --tsnet-control-url)", cfg.Hostname, err)
	}
	log.Info("on the tailnet with an embedded device", "hostname", cfg.Hostname, "addresses", st.TailscaleIPs, "tags", cfg.Tags)
	return &Tailnet{srv: srv}, nil
}

// Dial connects through the tailnet; names are resolved with the tailnet's
// MagicDNS.
func (t *Tailnet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return t.srv.Dial(ctx, network, addr)
}

// Close leaves the tailnet.
func (t *Tailnet) Close() error { return t.srv.Close() }
