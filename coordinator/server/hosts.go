package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// hostGuard answers people (the task, admin, schedule and webhook APIs and
// the console) only for the coordinator's own host names, and 421
// Misdirected Request for any other Host.
//
// Why: on the tailnet a person is known by the address their connection
// comes from, which a browser presents on behalf of any page it shows. A page
// at evil.example that rebinds its name to the coordinator's tailnet address
// (DNS rebinding) is same-origin with itself, so the browser lets its
// scripts call the API and read the answers, as the admin whose browser it
// is. The one thing such a request cannot change is its Host: it names the
// attacker's domain. Refusing every Host but the coordinator's own ends the
// attack; on the local transport, where the API needs a bearer token and the
// console a cookie no other name carries, it costs nothing and keeps every
// transport alike.
//
// Not guarded, because they answer whatever name a machine was given and
// hold nothing a rebinding page could use:
//   - the node API: nodes dial the URL they were enrolled with, by any name
//     the operator gave them, and prove themselves with their node key (and
//     on the tailnet a node tag); a browser holds neither, nor can it speak
//     the node's bidirectional stream;
//   - /healthz, /readyz and /metrics: probes and scrapers dial a pod's or a
//     machine's address; /metrics can be put behind its own token
//     (--metrics-token-file);
//   - the apt repository and /install.sh: nodes fetch them by whatever name
//     they reach the coordinator at, and they are public (packages and the
//     public key; the install script pins the key by fingerprint).
type hostGuard struct {
	names map[string]bool // lower-case host names and IP addresses, no port
	next  http.Handler
	log   *slog.Logger
	errs  *connect.ErrorWriter
}

// newHostGuard allows the loopback names and addresses and every host (a
// name, an address, or a URL whose host is taken) in allowed.
func newHostGuard(allowed []string, next http.Handler, log *slog.Logger) *hostGuard {
	g := &hostGuard{names: map[string]bool{"localhost": true}, next: next, log: log, errs: connect.NewErrorWriter()}
	for _, a := range allowed {
		if h := hostOf(a); h != "" {
			g.names[h] = true
		}
	}
	return g
}

// hostOf is the lower-case host of a Host header, a host:port, a bare name or
// address, or a URL; "" when there is none.
func hostOf(s string) string {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return ""
		}
		s = u.Host
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.TrimSuffix(strings.Trim(s, "[]"), ".")
	if ip := net.ParseIP(s); ip != nil {
		// One spelling per address: ::1 and 0:0:0:0:0:0:0:1 alike.
		return ip.String()
	}
	return strings.ToLower(s)
}

// allows reports whether a request's Host is one of the coordinator's.
func (g *hostGuard) allows(host string) bool {
	h := hostOf(host)
	if h == "" {
		return false
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return true
	}
	return g.names[h]
}

// Names are the allowed names, sorted, for the refusal and the log.
func (g *hostGuard) Names() []string {
	names := make([]string, 0, len(g.names))
	for n := range g.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// unguarded reports whether path is one of those any Host may reach (see
// hostGuard).
func unguarded(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/metrics", aptrepo.InstallPath:
		return true
	}
	return strings.HasPrefix(path, "/"+podiumv1connect.NodeServiceName+"/") || strings.HasPrefix(path, aptrepo.Prefix)
}

// maxHostInMessage bounds how much of a refused Host the answer and the log
// repeat.
const maxHostInMessage = 200

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if unguarded(r.URL.Path) || g.allows(r.Host) {
		g.next.ServeHTTP(w, r)
		return
	}
	host := r.Host
	if len(host) > maxHostInMessage {
		host = host[:maxHostInMessage] + "…"
	}
	msg := fmt.Sprintf("this coordinator does not answer for host %q: it answers only for its own names (%s). "+
		"If %q is a name of this coordinator (a proxy's, a load balancer's), start it with --allowed-host %s "+
		"(PODIUM_ALLOWED_HOSTS), or --public-url with that name (PODIUM_PUBLIC_URL)",
		host, strings.Join(g.Names(), ", "), host, hostOf(host))
	g.log.Warn("refused a request for another host (a misconfigured proxy, or a web page rebinding its name to this address)",
		"host", host, "path", r.URL.Path, "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"))
	// A Connect unary client reads the message from a JSON body, whatever
	// the status; a streaming or gRPC client (following a task's log) reads
	// it only where its protocol puts errors, which connect's ErrorWriter
	// knows; everything else (a browser, curl) reads the text.
	ct := r.Header.Get("Content-Type")
	switch {
	case !isPeopleAPI(r.URL.Path):
	case ct == "application/json" || ct == "application/proto":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": "permission_denied", "message": msg})
		return
	case g.errs.IsSupported(r):
		_ = g.errs.Write(w, r, connect.NewError(connect.CodePermissionDenied, errors.New(msg)))
		return
	}
	http.Error(w, msg, http.StatusMisdirectedRequest)
}

// maxHostNameBytes is the longest DNS name (RFC 1035).
const maxHostNameBytes = 253

// checkHosts refuses a public URL or an allowed host that is not one.
func checkHosts(publicURL string, allowed []string) error {
	if publicURL != "" {
		u, err := url.Parse(publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			return fmt.Errorf("--public-url %q: want the URL people open the coordinator at, such as https://podium.example.com", publicURL)
		}
		if err := checkHostName(u.Hostname()); err != nil {
			return fmt.Errorf("--public-url %q: %w", publicURL, err)
		}
	}
	for _, a := range allowed {
		if err := checkHostName(a); err != nil {
			return fmt.Errorf("--allowed-host %q: %w", a, err)
		}
	}
	return nil
}

// checkHostName accepts a DNS name or an IP address, without port or scheme.
func checkHostName(h string) error {
	if net.ParseIP(strings.Trim(h, "[]")) != nil {
		return nil
	}
	if h == "" || len(h) > maxHostNameBytes {
		return fmt.Errorf("want a host name of 1 to %d characters, such as podium.example.com", maxHostNameBytes)
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return errors.New("not a host name: want labels of letters, digits and inner hyphens, such as podium.example.com (no scheme, port or path)")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return errors.New("not a host name: want labels of letters, digits and inner hyphens, such as podium.example.com (no scheme, port or path)")
			}
		}
	}
	return nil
}
