package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
)

// callTimeout bounds every unary call. A coordinator that has not answered a
// Get in 30 s is not going to; the user is better served by an error than by
// a prompt that hangs.
const callTimeout = 30 * time.Second

// client is the coordinator, reached at one or more addresses (the replicas
// of one deployment, --server a,b,c). Calls go to the address that answered
// last; one that cannot be reached is skipped for the next, so that a replica
// dying does not take the CLI down with it.
type client struct {
	endpoints []*endpoint
	// cur is the index of the endpoint in use: the last one that answered,
	// or the last one tried.
	cur atomic.Int32
	// hasToken says whether a token is sent, to word a refusal.
	hasToken bool
	// note says that a call moved on from one address to the next (nil:
	// said nowhere). The CLI writes it on stderr.
	note func(string)
}

// endpoint is one address of the coordinator.
type endpoint struct {
	// server is the URL as the user should see it in messages.
	server string
	tasks  podiumv1connect.TaskServiceClient
	admin  podiumv1connect.AdminServiceClient
	// schedules is ScheduleService (podium schedule …).
	schedules podiumv1connect.ScheduleServiceClient
	// webhooks is WebhookService (podium webhook …).
	webhooks podiumv1connect.WebhookServiceClient
	// hc and base reach the replica's /readyz.
	hc   *http.Client
	base string
	// ready says /readyz answered 200 once: it is not asked again.
	ready atomic.Bool
}

// newClient builds the clients for servers (comma-separated URLs), sending
// token (if any) on every request, and trusting the CA in caFile (if any) as
// well as the system's. It does not contact the coordinator: the first call
// does.
func newClient(servers, token, caFile string) (*client, error) {
	var urls []*url.URL
	for s := range strings.SplitSeq(servers, ",") {
		s = strings.TrimSpace(s)
		if s == "" && strings.TrimSpace(servers) != "" {
			continue
		}
		u, err := parseServer(s)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, usageErrorf("--server %q names no coordinator: give its URL, or its replicas' URLs comma-separated, e.g. %s", servers, defaultServer)
	}
	var pool *x509.CertPool
	if caFile != "" {
		var err error
		if pool, err = loadCA(caFile); err != nil {
			return nil, err
		}
	}
	cl := &client{hasToken: token != ""}
	for _, u := range urls {
		t := newTransport(u.Scheme)
		if pool != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		hc := &http.Client{Transport: &bearer{token: token, next: t}}
		base := u.String()
		cl.endpoints = append(cl.endpoints, &endpoint{
			server:    base,
			hc:        hc,
			base:      strings.TrimSuffix(base, "/"),
			tasks:     podiumv1connect.NewTaskServiceClient(hc, base),
			admin:     podiumv1connect.NewAdminServiceClient(hc, base),
			schedules: podiumv1connect.NewScheduleServiceClient(hc, base),
			webhooks:  podiumv1connect.NewWebhookServiceClient(hc, base),
		})
	}
	return cl, nil
}

// current is the endpoint in use.
func (cl *client) current() *endpoint { return cl.endpoints[cl.cur.Load()] }

// server is the URL of the endpoint in use, for messages.
func (cl *client) server() string { return cl.current().server }

// index is ep's place in the list.
func (cl *client) index(ep *endpoint) int {
	for i, e := range cl.endpoints {
		if e == ep {
			return i
		}
	}
	return 0
}

// servers lists every address, for messages about all of them.
func (cl *client) servers() string {
	s := make([]string, len(cl.endpoints))
	for i, e := range cl.endpoints {
		s[i] = e.server
	}
	return strings.Join(s, ", ")
}

// parseServer accepts a URL, or a bare host:port meaning http://host:port,
// since the coordinator usually sits on a tailnet or loopback without TLS.
func parseServer(s string) (*url.URL, error) {
	if s == "" {
		return nil, usageErrorf("--server is empty: give the coordinator's URL, e.g. %s", defaultServer)
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usageErrorf("--server %q is not a coordinator URL: want http://HOST:PORT or https://HOST, e.g. %s", s, defaultServer)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// loadCA reads a PEM file of CA certificates for --ca-file: the system's CAs
// plus these, so one setting serves a private coordinator and public ones.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("--ca-file: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, usageErrorf("--ca-file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// newTransport speaks HTTP/2 without TLS (prior knowledge, "h2c") to http://
// servers, and HTTP/1.1 or HTTP/2 by negotiation to https:// ones. h2c is what
// the coordinator serves inside the tailnet, where WireGuard already encrypts,
// and one multiplexed connection carries both a followed event stream and the
// Cancel sent on Ctrl-C.
//
// Dead connections must be noticed: "podium run" may follow a task for hours,
// and a coordinator whose machine vanished sends no FIN. HTTP/2 pings and TCP
// keepalives turn that silence into an error within about half a minute, and
// the follower then reconnects (possibly to another replica).
func newTransport(scheme string) *http.Transport {
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     15 * time.Second,
			Interval: 5 * time.Second,
			Count:    3,
		},
	}
	t := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 20 * time.Second,
			PingTimeout:     10 * time.Second,
		},
		Protocols: new(http.Protocols),
	}
	if scheme == "http" {
		// Only unencrypted HTTP/2: with HTTP/1 also allowed, net/http would
		// pick HTTP/1 for http:// URLs. No proxy either: an HTTP/1 forward
		// proxy cannot carry h2c.
		t.Protocols.SetUnencryptedHTTP2(true)
	} else {
		t.Protocols.SetHTTP1(true)
		t.Protocols.SetHTTP2(true)
		t.Proxy = http.ProxyFromEnvironment
	}
	return t
}

// bearer adds "Authorization: Bearer <token>" to every request. A transport
// rather than a connect interceptor, because it covers unary and streaming
// calls alike with no per-kind code.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" {
		return b.next.RoundTrip(r)
	}
	// A RoundTripper must not modify the request it is given.
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// usageError is a mistake in how podium was invoked. It is told apart from
// other failures only for its exit code (see main.go).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// describe turns an error from a call to the coordinator into a sentence that
// says what happened and what to do. notFound is the sentence for
// connect.CodeNotFound, which only the caller can word ("no task task_…").
func (cl *client) describe(err error, notFound string) string {
	what := describeAt(cl.server(), cl.hasToken, err, notFound)
	if len(cl.endpoints) > 1 && unreachable(err) {
		// unary tried every address before giving up.
		return fmt.Sprintf("no address of the coordinator answered (%s); the last: %s", cl.servers(), what)
	}
	return what
}

// describeAt is describe for the coordinator at server.
func describeAt(server string, hasToken bool, err error, notFound string) string {
	c := struct {
		server   string
		hasToken bool
	}{server, hasToken}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return fmt.Sprintf("cannot reach the coordinator at %s: %v (is podium-coordinator running? set --server or PODIUM_SERVER)", c.server, opErr)
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return fmt.Sprintf("the coordinator at %s has a certificate no CA here vouches for (%v): if a private CA signed it, "+
			"give its certificate with --ca-file or PODIUM_CA_FILE", c.server, err)
	}
	if strings.Contains(err.Error(), "looked like an HTTP/1.1 header") {
		// net/http has no typed error for this: an http:// server that
		// answered HTTP/2 prior knowledge with HTTP/1.1.
		return fmt.Sprintf("the server at %s speaks only HTTP/1.1, not HTTP/2 without TLS: is it a podium-coordinator? (set --server or PODIUM_SERVER)", c.server)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeUnauthenticated:
		what := "refused the token"
		if !c.hasToken {
			what = "wants a token and none was given"
		}
		if strings.Contains(msg, "tailnet") {
			// A coordinator on a tailnet takes no token; its words say
			// what to do.
			return fmt.Sprintf("the coordinator at %s did not know who is calling: %s", c.server, msg)
		}
		if strings.Contains(msg, "PODIUM_TOKEN") {
			return fmt.Sprintf("the coordinator at %s %s: %s", c.server, what, msg)
		}
		return fmt.Sprintf("the coordinator at %s %s (%s): set PODIUM_TOKEN or --token to its token", c.server, what, msg)
	case connect.CodePermissionDenied:
		return fmt.Sprintf("the coordinator at %s does not allow this: %s", c.server, msg)
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeOutOfRange:
		return msg
	case connect.CodeNotFound:
		// A task retention removed says so, and when: the caller's
		// "no task …" would hide that.
		if notFound != "" && !strings.Contains(msg, "expired by retention") {
			return notFound
		}
		return msg
	case connect.CodeUnimplemented:
		return fmt.Sprintf("the server at %s does not serve this call (%s): is it a podium-coordinator, and as new as this podium?", c.server, msg)
	case connect.CodeDeadlineExceeded:
		return fmt.Sprintf("the coordinator at %s did not answer in time: %s", c.server, msg)
	case connect.CodeCanceled:
		// connect gives a request whose connection the server broke while
		// it was written (broken pipe, reset) the code of the person's own
		// Ctrl-C; only a cancelled context is an interruption.
		if errors.Is(err, context.Canceled) {
			return "interrupted"
		}
		return fmt.Sprintf("the coordinator at %s is unavailable: it closed the connection (%s); check that a podium-coordinator is running there and reachable", c.server, msg)
	case connect.CodeUnavailable:
		return fmt.Sprintf("the coordinator at %s is unavailable: %s (retry shortly; check that it is running and reachable)", c.server, msg)
	}
	return fmt.Sprintf("the coordinator at %s: %v", c.server, err)
}

// isDefinitive reports whether err is an answer that asking again cannot
// change: a follower gives up on these and retries everything else, because a
// broken connection or a restarting coordinator shows up as many codes
// (Unavailable, Unknown, Internal) depending on where it broke.
func isDefinitive(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists,
		connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeFailedPrecondition,
		connect.CodeUnimplemented, connect.CodeOutOfRange:
		return true
	}
	return false
}

// unary runs f with the per-call deadline against the endpoint in use and, if
// that one cannot be reached, against the others in turn. The endpoint that
// answers becomes the one in use. With more than one address, an endpoint is
// first asked whether it is ready (notReady), and one that says no or does not
// answer is passed over for the next, with a note saying so: a replica cut
// off from Postgres may accept the call and answer it only when the call's
// deadline has passed. The last address is called whatever it says, so that
// the error the user reads is the coordinator's own.
func unary[T any](ctx context.Context, cl *client, f func(context.Context, *endpoint) (T, error)) (T, error) {
	start := int(cl.cur.Load())
	var (
		v   T
		err error
	)
	for i := range cl.endpoints {
		n := (start + i) % len(cl.endpoints)
		ep := cl.endpoints[n]
		next := cl.endpoints[(n+1)%len(cl.endpoints)]
		cl.cur.Store(int32(n))
		last := i == len(cl.endpoints)-1
		if !last {
			if why := ep.notReady(ctx); why != "" {
				cl.movedOn(ep, next, why)
				continue
			}
		}
		v, err = func() (T, error) {
			ctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			return f(ctx, ep)
		}()
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			return v, err
		}
		if !last {
			cl.movedOn(ep, next, describeAt(ep.server, cl.hasToken, err, ""))
		}
	}
	return v, err
}

// readyTimeout bounds the question to /readyz: a replica that does not answer
// it in this time is passed over.
const readyTimeout = 3 * time.Second

// notReady asks the replica's /readyz and says why it is not ready (it answers
// 503, or nothing), or "" once it has answered otherwise (then it is not
// asked again).
func (ep *endpoint) notReady(ctx context.Context) string {
	if ep.ready.Load() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.base+"/readyz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := ep.hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Sprintf("it did not answer /readyz within %s", readyTimeout)
		}
		return fmt.Sprintf("cannot reach it: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	// 503 is a coordinator saying what is wrong; anything else is left to
	// the call itself to find out and say.
	if resp.StatusCode == http.StatusServiceUnavailable {
		return fmt.Sprintf("it is not ready (%s)", strings.TrimSpace(string(body)))
	}
	ep.ready.Store(true)
	return ""
}

// movedOn says that a call went from one address to the next, and why.
func (cl *client) movedOn(from, to *endpoint, why string) {
	if cl.note != nil {
		cl.note(fmt.Sprintf("the coordinator at %s: %s; trying %s", from.server, why, to.server))
	}
}

// unreachable reports whether err says the request never reached a working
// coordinator, so that another replica may be asked the same: the connection
// could not be made (nothing was sent), or the coordinator itself answered
// Unavailable. A connection that broke after the request went out is not
// included: the call may have been carried out (a task submitted, a message
// queued), and repeating it elsewhere could do it twice.
func unreachable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable && connect.IsWireError(err)
}

// dial builds the client for the global flags. A bad --server is a usage
// error of cmd; ok is false once it has been reported.
func (c *cli) dial(cmd *command) (cl *client, code int, ok bool) {
	cl, err := newClient(c.server, c.tokenFor(), c.caFile)
	if err != nil {
		fmt.Fprintf(c.stderr, "podium %s: %v\n", cmd.name, err)
		return nil, cmd.usageExit, false
	}
	cl.note = func(s string) { fmt.Fprintf(c.stderr, "podium: %s\n", s) }
	return cl, 0, true
}

// tokenFor is the token to present: --token or PODIUM_TOKEN, else the one
// podium login stored, but only to the server it was stored for, so that a
// coordinator chosen with --server or PODIUM_SERVER never receives it.
func (c *cli) tokenFor() string {
	if c.token == "" && c.file.Token != "" && c.server == c.file.Server {
		return c.file.Token
	}
	return c.token
}

// failed reports an error from a call to the coordinator and returns the exit
// code for it: 2 when what the command named does not exist (a mistyped ID
// is the caller's mistake, like any other bad argument), 125 otherwise.
func (c *cli) failed(cl *client, err error, notFound string) int {
	fmt.Fprintf(c.stderr, "podium: %s\n", cl.describe(err, notFound))
	return exitUsageIfNotFound(err)
}

// exitUsageIfNotFound is the exit code of a command whose call failed with
// err: 2 when what it named does not exist, 125 otherwise.
func exitUsageIfNotFound(err error) int {
	if connect.CodeOf(err) == connect.CodeNotFound {
		return exitUsage
	}
	return exitPodium
}

// taskCommand parses a command that takes exactly one task ID and dials the
// coordinator. When ok is false the command is over and code is its exit
// code (a usage error, --help, or a coordinator that cannot be reached).
func (c *cli) taskCommand(cmd *command, fs *flag.FlagSet, args []string) (id string, cl *client, code int, ok bool) {
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return "", nil, code, false
	}
	if len(rest) != 1 {
		return "", nil, c.usageFailure(cmd, fs, errors.New("want exactly one task ID")), false
	}
	cl, code, ok = c.dial(cmd)
	return rest[0], cl, code, ok
}
