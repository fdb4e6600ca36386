// Package join puts a coordinator replica on the tailnet, in one of two ways:
//
//   - Embedded: the replica is its own tailnet device (tsnet), with its own
//     name and address, state directory and auth key. Nothing on the host
//     needs Tailscale, which suits a container.
//   - Host: the replica serves on the address of the host's tailscaled and
//     asks that tailscaled who is calling. One device per machine, managed
//     the usual way (tailscale up, the admin console).
//
// Either way it returns listeners that only tailnet peers can reach and a
// WhoIser for the access policy in package tailnet. Everything that links
// tailscale's network stack is here, so the packages that only ask "who is
// calling?" stay light.
package join

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tsnet"

	"github.com/podiumhq/podium/coordinator/tailnet"
)

// DefaultHostname is the embedded coordinator's device name.
const DefaultHostname = "podium-coordinator"

// Endpoint is where a replica serves on the tailnet.
type Endpoint struct {
	// Listeners accept only tailnet connections. The first serves HTTP/2
	// without TLS (WireGuard already encrypts); a second, when the tailnet
	// has HTTPS certificates, serves TLS on port 443.
	Listeners []net.Listener
	// WhoIs names the device behind a connection's remote address.
	WhoIs tailnet.WhoIser
	// URL is what nodes and people should dial: https://<cert name> when
	// there is a certificate, else http://<tailnet IPv4>:<port>.
	URL string
	// Addr is the cleartext listener's tailnet address and port.
	Addr string
	// Names are the host names and addresses the device has on the
	// tailnet (its MagicDNS name, that name's first label, its IPs): the
	// names a request to it may carry in Host. The server answers people
	// for these alone, so a page that rebinds a name of its own to the
	// device's address gets nothing (DNS rebinding).
	Names []string

	stop func() error
}

// Close stops listening and, for an embedded node, leaves the tailnet.
func (e *Endpoint) Close() error {
	var errs []error
	for _, ln := range e.Listeners {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if e.stop != nil {
		errs = append(errs, e.stop())
	}
	return errors.Join(errs...)
}

// EmbeddedConfig configures the coordinator's own tailnet device.
type EmbeddedConfig struct {
	// StateDir keeps the device's keys between restarts; without it the
	// replica would be a new device (new name suffix, new address) each
	// time, and nodes would lose it.
	StateDir string
	// Hostname is the device name; DefaultHostname when empty.
	Hostname string
	// AuthKey joins a new device without a browser. Once the state dir
	// holds a device it is not needed.
	AuthKey string
	// ControlURL is the coordination server; empty means Tailscale's. Set it
	// for Headscale or a test control server.
	ControlURL string
	// Port serves HTTP/2 without TLS; 7070 when zero.
	Port int
	// Ephemeral makes the device go away when the replica stops (tests).
	Ephemeral bool
	// GetCertificate, when set, supplies the HTTPS certificate instead of the
	// tailnet (which gets it from Let's Encrypt through tailscaled). Tests
	// set it so that nothing ever asks the real CA.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Logger         *slog.Logger
}

// certWarmup bounds fetching the TLS certificate at start. The first fetch
// goes to the ACME CA through the control plane and can take tens of seconds;
// doing it before anyone connects keeps that out of a node's first handshake.
const certWarmup = 2 * time.Minute

// Embedded joins the tailnet as a device of its own and listens on it. It
// blocks until the device is up: with neither an auth key nor a stored
// device, that is until someone opens the login URL it logs.
func Embedded(ctx context.Context, cfg EmbeddedConfig) (*Endpoint, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.StateDir == "" {
		return nil, errors.New("the tailnet transport needs a state directory for the coordinator's Tailscale device: set --ts-state-dir (PODIUM_TS_STATE_DIR) to a directory that survives restarts")
	}
	if cfg.Hostname == "" {
		cfg.Hostname = DefaultHostname
	}
	if cfg.Port == 0 {
		cfg.Port = 7070
	}
	srv := &tsnet.Server{
		Dir: cfg.StateDir, Hostname: cfg.Hostname, AuthKey: cfg.AuthKey, ControlURL: cfg.ControlURL,
		Ephemeral: cfg.Ephemeral,
		UserLogf: func(format string, args ...any) {
			log.Info("tailscale: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
		},
	}
	// tsnet's backend log is a firehose; it is formatted only when asked for.
	if log.Enabled(ctx, slog.LevelDebug) {
		srv.Logf = func(format string, args ...any) {
			log.Debug("tsnet: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
		}
	}
	ok := false
	defer func() {
		if !ok {
			_ = srv.Close()
		}
	}()
	log.Info("joining the tailnet", "hostname", cfg.Hostname, "state_dir", cfg.StateDir, "control", cfg.ControlURL)
	st, err := srv.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("join the tailnet as %s: %w (check the auth key, TS_AUTHKEY or PODIUM_TS_AUTHKEY, and --ts-control-url)", cfg.Hostname, err)
	}
	lc, err := srv.LocalClient()
	if err != nil {
		return nil, err
	}
	ip4, _ := srv.TailscaleIPs()
	if !ip4.IsValid() {
		return nil, errors.New("joined the tailnet but got no IPv4 address; check the tailnet's IP pool settings")
	}
	port := strconv.Itoa(cfg.Port)
	plain, err := srv.Listen("tcp", ":"+port)
	if err != nil {
		return nil, fmt.Errorf("listen on the tailnet port %s: %w", port, err)
	}
	ep := &Endpoint{
		Listeners: []net.Listener{plain},
		WhoIs:     whoIs{lc},
		Addr:      net.JoinHostPort(ip4.String(), port),
		Names:     deviceNames(st.Self, st.TailscaleIPs),
	}
	ep.URL = "http://" + ep.Addr
	warmCtx, stopWarm := context.WithCancel(context.Background())
	var warm sync.WaitGroup
	ep.stop = func() error {
		stopWarm()
		warm.Wait()
		return srv.Close()
	}
	if domain := certDomain(st.CurrentTailnet != nil && st.CurrentTailnet.MagicDNSEnabled, st.CertDomains); domain != "" {
		ln, err := srv.Listen("tcp", ":443")
		if err != nil {
			_ = plain.Close()
			return nil, fmt.Errorf("listen on the tailnet port 443: %w", err)
		}
		getCert := cfg.GetCertificate
		if getCert == nil {
			getCert = lc.GetCertificate
			warm.Add(1)
			go func() {
				defer warm.Done()
				ctx, cancel := context.WithTimeout(warmCtx, certWarmup)
				defer cancel()
				if _, _, err := lc.CertPair(ctx, domain); err != nil && warmCtx.Err() == nil {
					log.Warn("could not get the tailnet HTTPS certificate yet; HTTPS handshakes will retry, and cleartext HTTP/2 still serves",
						"domain", domain, "err", err)
				}
			}()
		}
		// tsnet's ListenTLS offers no ALPN, and without "h2" clients fall
		// back to HTTP/1.1, on which the node stream cannot run.
		ep.Listeners = append(ep.Listeners, tls.NewListener(ln, &tls.Config{
			GetCertificate: getCert,
			NextProtos:     []string{"h2", "http/1.1"},
		}))
		ep.URL = "https://" + domain
	}
	ok = true
	log.Info("on the tailnet", "hostname", cfg.Hostname, "url", ep.URL, "addr", ep.Addr, "tls", len(ep.Listeners) > 1)
	return ep, nil
}

// certDomain is the name to serve HTTPS for, or "" when the tailnet has no
// certificates (HTTPS or MagicDNS switched off in its DNS settings).
func certDomain(magicDNS bool, domains []string) string {
	if !magicDNS || len(domains) == 0 {
		return ""
	}
	return domains[0]
}

// Host serves on the addresses of the host's tailscaled and asks it who is
// calling. It does not start or log in tailscaled: that is the host's.
func Host(ctx context.Context, port int, log *slog.Logger) (*Endpoint, error) {
	return host(ctx, &local.Client{}, port, log)
}

// host is Host with the local client given, so a test can point it at a
// socket where no tailscaled listens.
func host(ctx context.Context, lc *local.Client, port int, log *slog.Logger) (*Endpoint, error) {
	if log == nil {
		log = slog.Default()
	}
	if port == 0 {
		port = 7070
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := lc.StatusWithoutPeers(sctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reach this machine's tailscaled (%w): is Tailscale installed and running? (`tailscale status`); "+
			"or use --transport tailnet to join with the coordinator's own device", err)
	}
	if st.BackendState != ipn.Running.String() {
		return nil, fmt.Errorf("this machine's tailscaled is %s, not Running: run `tailscale up` first", st.BackendState)
	}
	var v4 netip.Addr
	for _, ip := range st.TailscaleIPs {
		if ip.Is4() {
			v4 = ip
		}
	}
	if !v4.IsValid() {
		return nil, errors.New("this machine's tailscaled has no IPv4 tailnet address")
	}
	addr := net.JoinHostPort(v4.String(), strconv.Itoa(port))
	// Only the tailnet address: a connection that reaches this listener came
	// through tailscaled, so WhoIs knows its source.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on the tailnet address %s: %w", addr, err)
	}
	log.Info("serving on the host's tailnet address", "addr", addr)
	return &Endpoint{Listeners: []net.Listener{ln}, WhoIs: whoIs{lc}, Addr: addr, URL: "http://" + addr,
		Names: deviceNames(st.Self, st.TailscaleIPs)}, nil
}

// deviceNames are the names a device is reached by on the tailnet: its
// MagicDNS name (without the root's dot), the short name MagicDNS also
// answers for, and its addresses.
func deviceNames(self *ipnstate.PeerStatus, ips []netip.Addr) []string {
	var names []string
	if self != nil {
		if dns := strings.TrimSuffix(self.DNSName, "."); dns != "" {
			names = append(names, dns)
			if short, _, ok := strings.Cut(dns, "."); ok && short != "" {
				names = append(names, short)
			}
		}
	}
	for _, ip := range ips {
		names = append(names, ip.String())
	}
	return names
}

// whoIs adapts tailscale's local client to tailnet.WhoIser.
type whoIs struct{ lc *local.Client }

func (w whoIs) WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error) {
	r, err := w.lc.WhoIs(ctx, addr)
	if errors.Is(err, local.ErrPeerNotFound) {
		return nil, fmt.Errorf("%w (%v)", tailnet.ErrNotPeer, err)
	}
	return r, err
}
