// Package transport builds the HTTP client the agent reaches its coordinator
// with.
//
// The node stream is a bidirectional Connect RPC, which needs HTTP/2 end to
// end. Inside a tailnet the coordinator is served over plain http:// — the
// WireGuard tunnel already encrypts — so for http:// URLs the client speaks
// HTTP/2 without TLS from the first byte ("prior knowledge"); for https:// it
// negotiates HTTP/2 through TLS as usual. Plain http:// goes only to
// loopback and tailnet addresses unless the operator says otherwise (see
// Security), because anywhere else the node key would travel in clear text.
package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// pingInterval and pingTimeout make a connection whose peer has silently gone
// away (a wedged TCP connection, a coordinator host that lost power) fail
// within about half a minute instead of when the kernel gives up on it, which
// can take many minutes. Without them the agent would keep heartbeating into
// a connection nobody reads.
const (
	pingInterval = 15 * time.Second
	pingTimeout  = 15 * time.Second
	// tlsHandshakeTimeout bounds a TLS handshake with a coordinator.
	tlsHandshakeTimeout = 10 * time.Second
)

// NewClient returns an HTTP client for the coordinator at rawURL, which must
// be an http:// or https:// URL. The client has no overall timeout, because
// the node stream lives for hours; callers bound each unary call with a
// context deadline.
//
// Connections are dialled with the first of: the dialer given WithDial, the
// one in the request's context (ContextWithDialer), and the host's network
// stack, where the host's tailscaled provides MagicDNS and the routes.
func NewClient(rawURL string, opts ...Option) (*http.Client, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var protocols http.Protocols
	if u.Scheme == "https" {
		protocols.SetHTTP1(true) // ALPN picks HTTP/2; HTTP/1 only serves unary calls
		protocols.SetHTTP2(true)
	} else {
		// Only unencrypted HTTP/2: with HTTP/1 also allowed, net/http would
		// use HTTP/1 for http:// URLs and the bidirectional stream would fail.
		protocols.SetUnencryptedHTTP2(true)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	host := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if u.Scheme == "http" {
		host.ControlContext = checkPlaintextDial
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if o.dial != nil {
			return o.dial(ctx, network, addr)
		}
		if d := dialerFrom(ctx); d != nil {
			return d(ctx, network, addr)
		}
		return host.DialContext(ctx, network, addr)
	}
	tr := &http.Transport{
		// A proxy cannot reach tailnet addresses: connections through an
		// embedded tailnet device go straight to it.
		Proxy: func(r *http.Request) (*url.URL, error) {
			if o.dial != nil || dialerFrom(r.Context()) != nil {
				return nil, nil
			}
			return http.ProxyFromEnvironment(r)
		},
		DialContext: dial,
		// The handshake is made here rather than by the transport so that
		// it uses the CA of the request's Security (see ContextWithSecurity).
		DialTLSContext:      dialTLS(dial),
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		IdleConnTimeout:     90 * time.Second,
		Protocols:           &protocols,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: pingInterval,
			PingTimeout:     pingTimeout,
		},
	}
	return &http.Client{Transport: tr}, nil
}

// ParseURL checks a coordinator URL and returns it without a trailing slash
// (Connect appends the procedure path itself). A missing scheme or a path
// is refused with what to write instead, because it would fail later with a
// far less helpful error.
func ParseURL(rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, errors.New("no coordinator URL: pass one like http://coordinator.tailnet:8080")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("coordinator URL %q is not a URL: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if !strings.Contains(rawURL, "://") {
			return nil, fmt.Errorf("coordinator URL %q has no scheme: write http://%s (or https:// when the coordinator serves TLS)", rawURL, rawURL)
		}
		return nil, fmt.Errorf("coordinator URL %q must start with http:// or https://", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("coordinator URL %q names no host", rawURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// NormalizeURL is ParseURL returning a string.
func NormalizeURL(rawURL string) (string, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}
