package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// Security is how the agent's connections to coordinators are protected. It
// travels in the context the agent runs on (ContextWithSecurity), as the
// dialer does and for the same reason: the clients are built deep inside
// enrollment and the session, for URLs learned at run time, and every one of
// them must follow the operator's choice.
type Security struct {
	// RootCAs verifies the certificates of https:// coordinators, for a
	// coordinator whose certificate a private CA signed (LoadCAFile adds it
	// to the system's). Nil means the system's roots (which SSL_CERT_FILE and SSL_CERT_DIR replace, as
	// everywhere in Go). Through an HTTPS proxy only the system's roots
	// apply.
	RootCAs *x509.CertPool
	// InsecurePlaintext allows http:// to a coordinator that is neither on
	// this machine nor on the tailnet, for when something else encrypts the
	// path (a VPN other than Tailscale, say).
	InsecurePlaintext bool
	// TailnetInterface is the network interface tailscaled encrypts
	// through; "" means tailscale0. Plain http:// to a tailnet address is
	// allowed only when the route to it goes out this interface.
	TailnetInterface string
}

type securityKey struct{}

// ContextWithSecurity returns ctx carrying sec, which clients from NewClient
// follow for requests made with ctx (or a context derived from it). Without
// it: the system's roots, and plain http:// only to loopback and the tailnet.
func ContextWithSecurity(ctx context.Context, sec Security) context.Context {
	return context.WithValue(ctx, securityKey{}, sec)
}

func securityFrom(ctx context.Context) Security {
	s, _ := ctx.Value(securityKey{}).(Security)
	return s
}

// LoadCAFile reads a PEM file of one or more CA certificates, and returns
// them with the system's.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// The tailnet's address ranges. An address in one is the tailnet's only when
// the route to it goes out the tailnet's interface: 100.64.0.0/10 is also
// the carrier-grade NAT range (RFC 6598), which ISPs and clouds hand out on
// ordinary, unencrypted networks.
var (
	tailnetV4 = netip.MustParsePrefix("100.64.0.0/10")
	tailnetV6 = netip.MustParsePrefix("fd7a:115c:a1e0::/48")
)

// DefaultTailnetInterface is the interface tailscaled makes, unless told
// otherwise with its --tun flag.
const DefaultTailnetInterface = "tailscale0"

// ErrPlaintext is the refusal of a plain http:// connection that would
// carry the node key across a network nothing encrypts.
var ErrPlaintext = errors.New("plain http:// only reaches a coordinator on this machine or on the tailnet")

// errNoRoute is the kernel's answer for an address nothing routes to.
var errNoRoute = errors.New("no route")

// plaintextProblem says why plain HTTP to ip would not stay on this machine
// or inside WireGuard, or "" when it would: ip is a loopback address, or a
// tailnet address the kernel routes out the tailnet's interface.
func plaintextProblem(ip netip.Addr, sec Security) string {
	ip = ip.Unmap()
	if ip.IsLoopback() {
		return ""
	}
	if !tailnetV4.Contains(ip) && !tailnetV6.Contains(ip) {
		return fmt.Sprintf("%s is neither", ip)
	}
	want := sec.TailnetInterface
	if want == "" {
		want = DefaultTailnetInterface
	}
	iface, err := routeInterface(ip)
	if err == nil {
		// This machine's own address (a coordinator beside the agent,
		// bound to its tailnet address) is routed through the loopback
		// interface: it never leaves the machine.
		if i, ierr := net.InterfaceByName(iface); ierr == nil && i.Flags&net.FlagLoopback != 0 {
			return ""
		}
	}
	switch {
	case errors.Is(err, errNoRoute):
		return fmt.Sprintf("%s is in the tailnet's address range, but this machine has no route to it, "+
			"so it is not reached through the tailnet interface %s (is tailscaled up?)", ip, want)
	case err != nil:
		return fmt.Sprintf("%s is in the tailnet's address range, but which interface reaches it could not be read (%v), "+
			"so nothing says WireGuard encrypts it", ip, err)
	case iface != want && ip.Is4():
		return fmt.Sprintf("%s is in the tailnet's address range, but the route to it goes out %s, not the tailnet "+
			"interface %s: 100.64.0.0/10 is also carrier-grade NAT's range, and there nothing encrypts the path", ip, iface, want)
	case iface != want:
		return fmt.Sprintf("%s is in the tailnet's address range, but the route to it goes out %s, not the tailnet "+
			"interface %s, and there nothing encrypts the path", ip, iface, want)
	}
	return ""
}

func plaintextRefusal(why string) error {
	return fmt.Errorf("%w: %s, so the node key and task secrets would cross the network in clear text; "+
		"use an https:// URL (with --ca-file for a private CA), join the tailnet (tailscale up, or podium-agent --tsnet), "+
		"pass --tailnet-interface NAME if tailscaled's interface has another name, or pass --insecure-plaintext "+
		"(PODIUM_INSECURE_PLAINTEXT) if something else encrypts the path", ErrPlaintext, why)
}

// checkPlaintextDial is the net.Dialer's ControlContext for http:// clients:
// it sees the address actually dialled, after name resolution, so a MagicDNS
// name that resolves into the tailnet passes and anything else is refused
// before a byte is sent.
func checkPlaintextDial(ctx context.Context, _, address string, _ syscall.RawConn) error {
	sec := securityFrom(ctx)
	if sec.InsecurePlaintext {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return plaintextRefusal(fmt.Sprintf("%s is not an address this agent can check", address))
	}
	if why := plaintextProblem(ap.Addr(), sec); why != "" {
		return plaintextRefusal(why)
	}
	return nil
}

// CheckPlaintext refuses, before anything is sent, an http:// coordinator URL
// that is neither on this machine nor on the tailnet (reached out the
// tailnet's interface, see plaintextProblem), so that a mistaken URL
// stops the agent at start with the reason, not at every reconnect. A name is
// resolved to decide; a name that does not resolve is left to the check made
// on every connection (which also covers the addresses learned later).
// Connections through the agent's own tailnet device (ContextWithDialer) are
// always encrypted and are not checked.
func CheckPlaintext(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	sec := securityFrom(ctx)
	if err != nil || u.Scheme != "http" || sec.InsecurePlaintext || dialerFrom(ctx) != nil {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := plaintextProblem(ip, sec); why != "" {
			return plaintextRefusal(why)
		}
		return nil
	}
	if host == "localhost" || strings.HasSuffix(strings.TrimSuffix(host, "."), ".ts.net") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if why := plaintextProblem(ip, sec); why != "" {
			return plaintextRefusal(fmt.Sprintf("%s resolves to %s, and %s", host, ip, why))
		}
	}
	return nil
}

// dialTLS is the client's DialTLSContext for https:// coordinators: the
// handshake with the roots of the request's Security. It offers HTTP/2 first,
// which the node stream needs.
func dialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, &tls.Config{
			ServerName: host,
			RootCAs:    securityFrom(ctx).RootCAs,
			NextProtos: []string{"h2", "http/1.1"},
			MinVersion: tls.VersionTLS12,
		})
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return tc, nil
	}
}
