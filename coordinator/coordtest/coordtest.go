// Package coordtest starts real coordinator replicas for tests, on a real
// Postgres from pgtest, and gives tests Connect clients for them. Production
// code never imports it.
package coordtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/leader"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/watchdog"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/tlstest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// Token is the API token test replicas accept: as long as the coordinator
// requires (server.MinTokenBytes).
const Token = "test-token-0123456789abcdef0123456789abcdef"

// Replica is a running coordinator replica.
type Replica struct {
	*server.Server
	client *http.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop shuts the replica down gracefully and waits for it.
func (r *Replica) Stop() {
	r.cancel()
	<-r.done
}

// Options tune a test replica.
type Options struct {
	Nodes    nodes.Config
	Enroll   enroll.Config
	Watchdog watchdog.Config
	Dispatch dispatch.Config
	Leader   leader.Config
	// Artifacts points the replica at an object store (see internal/s3test).
	Artifacts artifacts.Config
	// Archive is the replica's log archive job (see server.Config).
	Archive logarchive.Config
	// Transport and Tailnet put the replica on a tailnet (see
	// internal/tailnettest) instead of loopback with the test token.
	Transport string
	Tailnet   server.TailnetConfig
	// Logger replaces the replica's logger, for tests that read its log.
	Logger *slog.Logger
	// Listen is the address to serve on; empty picks a free loopback port.
	// A test that replaces a replica gives the new one the old one's
	// address, so that nodes enrolled with it find it again.
	Listen string
	// TLS makes the local transport serve HTTPS with the certificate of a
	// tlstest.CA, and the replica's clients trust that CA.
	TLS *tlstest.CA
	// BodyReadTimeout and MaxConnections are the server's (see
	// server.Config); zero keeps its defaults.
	BodyReadTimeout time.Duration
	MaxConnections  int
	// SecretsKeyFile is the replica's secrets key (see server.Config).
	SecretsKeyFile string
	// Retention is the replica's retention (see server.Config).
	Retention retention.Config
	// Schedules is the replica's schedule job (see server.Config); tests
	// give it a clock they move.
	Schedules cron.Config
	// Notify is the replica's webhook delivery worker (see server.Config);
	// tests give it short backoffs.
	Notify notify.Config
	// PublicURL, AllowedHosts and MetricsTokenFile are the server's (see
	// server.Config).
	PublicURL        string
	AllowedHosts     []string
	MetricsTokenFile string
	// QueueTimeout is the replica's --queue-timeout (see server.Config).
	QueueTimeout time.Duration
	// DownloadDir holds the CLI binaries the replica serves at /download/
	// (see server.Config).
	DownloadDir string
}

// Start runs a replica on the database until the test ends.
func Start(t testing.TB, databaseURL string, opts Options) *Replica {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("PODIUM_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if opts.Logger != nil {
		log = opts.Logger
	}
	listen, token := "127.0.0.1:0", Token
	if opts.Transport != "" && opts.Transport != server.TransportLocal {
		listen, token = ":7070", ""
		if opts.Tailnet.GetCertificate == nil {
			// Else the replica would ask Let's Encrypt for its tailnet name.
			t.Fatal("coordtest: a tailnet replica needs Tailnet.GetCertificate (tailnettest.NewCA)")
		}
	}
	if opts.Listen != "" {
		listen = opts.Listen
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := server.Config{
		DatabaseURL: databaseURL, Listen: listen, Token: token, Logger: log, Nodes: opts.Nodes, Enroll: opts.Enroll, Watchdog: opts.Watchdog, Dispatch: opts.Dispatch, Leader: opts.Leader,
		Artifacts: opts.Artifacts, Archive: opts.Archive, Transport: opts.Transport, Tailnet: opts.Tailnet,
		BodyReadTimeout: opts.BodyReadTimeout, MaxConnections: opts.MaxConnections, SecretsKeyFile: opts.SecretsKeyFile,
		Retention: opts.Retention, Schedules: opts.Schedules, Notify: opts.Notify,
		PublicURL: opts.PublicURL, AllowedHosts: opts.AllowedHosts, MetricsTokenFile: opts.MetricsTokenFile,
		QueueTimeout: opts.QueueTimeout, DownloadDir: opts.DownloadDir,
	}
	client := HTTPClient()
	if opts.TLS != nil {
		cfg.TLSCertFile, cfg.TLSKeyFile = opts.TLS.CertFile, opts.TLS.KeyFile
		var p http.Protocols
		p.SetHTTP2(true)
		client = &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{RootCAs: opts.TLS.Pool}}}
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("coordtest: start replica: %v", err)
	}
	r := &Replica{Server: srv, client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := srv.Run(ctx); err != nil {
			t.Errorf("coordtest: replica stopped: %v", err)
		}
	}()
	t.Cleanup(r.Stop)
	return r
}

// New starts a replica on a fresh database.
func New(t testing.TB) (*Replica, pgtest.Database) {
	db := pgtest.NewDatabase(t)
	return Start(t, db.URL, Options{}), db
}

// HTTPClient speaks HTTP/2 without TLS, which bidirectional streams need.
func HTTPClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}
func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}
func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// HTTPClient is an HTTP client that reaches the replica: HTTP/2 without TLS,
// or through TLS trusting the test CA when the replica serves TLS.
func (r *Replica) HTTPClient() *http.Client { return r.client }

// Tasks is a TaskService client with the test token.
func (r *Replica) Tasks() podiumv1connect.TaskServiceClient { return TaskClient(r.client, r.URL()) }

// Admin is an AdminService client with the test token.
func (r *Replica) Admin() podiumv1connect.AdminServiceClient { return AdminClient(r.client, r.URL()) }

// TaskClient is a TaskService client with the test token for the replica at
// url, which may be one running as its own process.
func TaskClient(c *http.Client, url string) podiumv1connect.TaskServiceClient {
	return podiumv1connect.NewTaskServiceClient(c, url, connect.WithInterceptors(bearer(Token)))
}

// AdminClient is an AdminService client with the test token for the replica
// at url, which may be one running as its own process.
func AdminClient(c *http.Client, url string) podiumv1connect.AdminServiceClient {
	return podiumv1connect.NewAdminServiceClient(c, url, connect.WithInterceptors(bearer(Token)))
}

// Schedules is a ScheduleService client with the test token.
func (r *Replica) Schedules() podiumv1connect.ScheduleServiceClient {
	return podiumv1connect.NewScheduleServiceClient(r.client, r.URL(), connect.WithInterceptors(bearer(Token)))
}

// Webhooks is a WebhookService client with the test token.
func (r *Replica) Webhooks() podiumv1connect.WebhookServiceClient {
	return podiumv1connect.NewWebhookServiceClient(r.client, r.URL(), connect.WithInterceptors(bearer(Token)))
}

// NodeClient is a NodeService client.
func (r *Replica) NodeClient() podiumv1connect.NodeServiceClient {
	return podiumv1connect.NewNodeServiceClient(r.client, r.URL())
}

// Eventually polls cond until it is true or the wait runs out (wait.For).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, d, what, cond)
}

// KeyFile writes a fresh secrets key (32 random bytes, mode 0600) for a
// replica's SecretsKeyFile and returns its path.
func KeyFile(t testing.TB) string {
	t.Helper()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
