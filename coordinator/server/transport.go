package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tailnet/join"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// The transports a replica serves on. They differ in who can reach it and in
// how a caller is known: by a shared bearer token on loopback, or by what
// Tailscale says the calling device is.
const (
	// TransportLocal serves plain HTTP on loopback (or a published container
	// port) and admits API callers that present the token. For one machine
	// and the demo.
	TransportLocal = "local"
	// TransportTailnet makes the replica a tailnet device of its own (tsnet).
	TransportTailnet = "tailnet"
	// TransportHost serves on the host tailscaled's address and asks it who
	// is calling.
	TransportHost = "host"
)

// MinTokenBytes is the shortest API token the local transport accepts: the
// token is all that stands between the network and the API, so it must be
// too long to guess (32 random bytes, or 64 hex digits, are what
// `openssl rand -hex 32` gives).
const MinTokenBytes = 32

// TailnetConfig configures the tailnet and host transports.
type TailnetConfig struct {
	// StateDir, Hostname, AuthKey and ControlURL configure the embedded
	// device (tailnet transport only); see join.EmbeddedConfig.
	StateDir   string
	Hostname   string
	AuthKey    string
	ControlURL string
	// Ephemeral makes the embedded device leave the tailnet on shutdown.
	Ephemeral bool
	// GetCertificate replaces the tailnet's HTTPS certificate; see
	// join.EmbeddedConfig.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// NodeTag is the tag that makes a device a node; tailnet.DefaultNodeTag
	// when empty.
	NodeTag string
	// AllowUntaggedNodes lets untagged devices enroll and connect as nodes,
	// with a warning each time one enrolls.
	AllowUntaggedNodes bool
	// DefaultRole is the role of a signed-in person with neither a grant in
	// the tailnet policy nor a user row (podium user add LOGIN); empty
	// refuses them.
	DefaultRole string
}

// checkTransport refuses a configuration that cannot work before anything is
// started.
func checkTransport(cfg *Config) error {
	switch cfg.Transport {
	case "", TransportLocal:
		cfg.Transport = TransportLocal
		if cfg.Token == "" {
			return errors.New("no API token: set PODIUM_TOKEN (or --token) to a secret that CLI users will present; " +
				"make one with `openssl rand -hex 32`")
		}
		if len(cfg.Token) < MinTokenBytes {
			return fmt.Errorf("the API token is %d bytes; it is all that guards the API, so it must be at least %d: "+
				"make one with `openssl rand -hex 32`", len(cfg.Token), MinTokenBytes)
		}
		if cfg.Listen == "" {
			cfg.Listen = "127.0.0.1:7070"
		}
		if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
			return errors.New("TLS needs both a certificate and its key: set --tls-cert and --tls-key (PODIUM_TLS_CERT, PODIUM_TLS_KEY), or neither")
		}
		loopback, err := checkListen(cfg.Listen, cfg.AllowNonLoopback)
		if err != nil {
			return err
		}
		if !loopback && cfg.TLSCertFile == "" && !cfg.InsecurePlaintext {
			return fmt.Errorf("listen address %q is not loopback and no TLS certificate is set: the API token, node keys and "+
				"task secrets would cross the network in clear text. Set --tls-cert and --tls-key (PODIUM_TLS_CERT, PODIUM_TLS_KEY), "+
				"or pass --insecure-plaintext (PODIUM_INSECURE_PLAINTEXT) if something else encrypts the traffic, "+
				"such as a TLS proxy in front of the coordinator", cfg.Listen)
		}
		return nil
	case TransportTailnet, TransportHost:
		if r := cfg.Tailnet.DefaultRole; r != "" {
			if _, err := access.ParseRole(r); err != nil {
				return fmt.Errorf("--default-role: %w (or leave it unset to refuse people without a role)", err)
			}
		}
		if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
			return errors.New("--tls-cert and --tls-key are for the local transport: on the tailnet, WireGuard encrypts, " +
				"and the replica serves HTTPS with the tailnet's own certificate when the tailnet has one")
		}
		if cfg.Listen == "" {
			cfg.Listen = ":7070"
		}
		if _, err := tailnetPort(cfg.Listen); err != nil {
			return err
		}
		if cfg.Transport == TransportTailnet && cfg.Tailnet.StateDir == "" {
			return errors.New("the tailnet transport needs a state directory for the coordinator's Tailscale device: " +
				"set --ts-state-dir (PODIUM_TS_STATE_DIR) to a directory that survives restarts")
		}
		return nil
	}
	return fmt.Errorf("transport %q: want local, tailnet or host", cfg.Transport)
}

// tailnetPort is the port of --listen, which is all the tailnet transports
// take from it: the address is the tailnet's.
func tailnetPort(listen string) (int, error) {
	_, p, err := net.SplitHostPort(listen)
	if err == nil {
		var port int
		if port, err = strconv.Atoi(p); err == nil && port >= 0 && port < 65536 {
			return port, nil
		}
	}
	return 0, fmt.Errorf("listen address %q: on the tailnet only its port is used; want :PORT, e.g. :7070", listen)
}

// openTransport opens the replica's listeners and decides the interceptors
// that identify callers of the node API and of the people's APIs (tasks and
// admin).
func (s *Server) openTransport(ctx context.Context) error {
	if s.cfg.Transport == TransportLocal {
		ln, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
		}
		s.addr = ln.Addr().String()
		s.scheme = "http"
		if s.certs != nil {
			s.scheme = "https"
			ln = tls.NewListener(ln, &tls.Config{
				GetCertificate: s.certs.get,
				NextProtos:     []string{"h2", "http/1.1"}, // the node stream needs HTTP/2
				MinVersion:     tls.VersionTLS12,
			})
		}
		// The bound is taken before a connection is accepted, so one waiting
		// for a slot costs nothing, not even a handshake (which the HTTP
		// server makes, after accepting).
		s.listeners = []net.Listener{s.conns.listener(ln)}
		if s.cfg.Advertise == "" {
			s.cfg.Advertise = s.scheme + "://" + s.addr
		}
		// Nodes prove themselves with their node key; API callers with the
		// token, which tokenGate checks before Connect reads a body.
		s.nodeAuth = connect.WithInterceptors()
		s.apiAuth = connect.WithInterceptors(auditor{store: s.store, transport: s.cfg.Transport, log: s.log},
			access.Interceptor(&access.Resolver{Users: s.store}), requestedBy{})
		return nil
	}
	if s.cfg.Token != "" {
		s.log.Warn("ignoring the API token: on the tailnet callers are identified by Tailscale, not by a token")
	}
	port, _ := tailnetPort(s.cfg.Listen)
	var ep *join.Endpoint
	var err error
	if s.cfg.Transport == TransportTailnet {
		t := s.cfg.Tailnet
		ep, err = join.Embedded(ctx, join.EmbeddedConfig{
			StateDir: t.StateDir, Hostname: t.Hostname, AuthKey: t.AuthKey, ControlURL: t.ControlURL,
			Ephemeral: t.Ephemeral, GetCertificate: t.GetCertificate, Port: port, Logger: s.log,
		})
	} else {
		ep, err = join.Host(ctx, port, s.log)
	}
	if err != nil {
		return err
	}
	s.endpoint = ep
	for _, ln := range ep.Listeners {
		s.listeners = append(s.listeners, s.conns.listener(ln))
	}
	s.addr = ep.Addr
	s.scheme = "http"
	if s.cfg.Advertise == "" {
		s.cfg.Advertise = ep.URL
	}
	if s.cfg.Tailnet.AllowUntaggedNodes {
		s.log.Warn("untagged devices may enroll and connect as nodes (--allow-untagged-nodes); a node on a person's device runs tasks with that person's tailnet rights")
	}
	policy := &tailnet.Policy{WhoIs: ep.WhoIs, NodeTag: s.cfg.Tailnet.NodeTag,
		AllowUntaggedNodes: s.cfg.Tailnet.AllowUntaggedNodes, Log: s.log}
	s.nodeAuth = connect.WithInterceptors(policy.NodeAPI())
	resolver := &access.Resolver{Users: s.store, DefaultRole: access.Role(s.cfg.Tailnet.DefaultRole),
		AllowUntaggedNodes: s.cfg.Tailnet.AllowUntaggedNodes}
	s.apiAuth = connect.WithInterceptors(policy.PeopleAPI(podiumv1connect.AdminServiceWhoAmIProcedure),
		auditor{store: s.store, transport: s.cfg.Transport, log: s.log}, access.Interceptor(resolver), requestedBy{})
	return nil
}
