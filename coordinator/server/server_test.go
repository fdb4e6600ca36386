package server_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// The tests here are of what server itself does: the transport's
// configuration, the token check and who it says the caller is, and the
// health endpoints. What the wired parts do together is in
// coordinator/integration.

func TestMain(m *testing.M) { pgtest.Main(m) }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}
func (b bearer) WrapStreamingClient(n connect.StreamingClientFunc) connect.StreamingClientFunc {
	return n
}
func (b bearer) WrapStreamingHandler(n connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return n
}

func adminWithToken(r *coordtest.Replica, token string) podiumv1connect.AdminServiceClient {
	return podiumv1connect.NewAdminServiceClient(coordtest.HTTPClient(), r.URL(), connect.WithInterceptors(bearer(token)))
}

// Over the local transport the coordinator knows a caller only by the token,
// and says so; what it records as requested_by is "token". A missing or wrong
// token is refused before any service sees the call.
func TestWhoAmIOverLocal(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx := context.Background()
	res, err := r.Admin().WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Kind != podiumv1.CallerKind_CALLER_KIND_TOKEN || res.Msg.Login != "" || res.Msg.Transport != "local" {
		t.Errorf("WhoAmI = %v, want a token caller over local", res.Msg)
	}
	sub, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Msg.Task.RequestedBy != "token" {
		t.Errorf("requested_by %q, want token", sub.Msg.Task.RequestedBy)
	}
	for _, token := range []string{"wrong", ""} {
		_, err = adminWithToken(r, token).WhoAmI(ctx, connect.NewRequest(&podiumv1.WhoAmIRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("WhoAmI with token %q: %v, want Unauthenticated", token, err)
		}
	}
}

// A transport that cannot work is refused before anything starts, with what
// to write instead.
func TestTransportConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tok := coordtest.Token
	for _, tc := range []struct {
		cfg  server.Config
		says string
	}{
		{server.Config{Transport: "wireguard", Token: tok}, "want local, tailnet or host"},
		{server.Config{Transport: server.TransportLocal}, "PODIUM_TOKEN"},
		{server.Config{Token: "tok-short"}, "openssl rand -hex 32"},
		{server.Config{Token: strings.Repeat("x", server.MinTokenBytes-1)}, "at least 32"},
		{server.Config{Transport: server.TransportTailnet, Listen: "7070"}, "want :PORT"},
		{server.Config{Transport: server.TransportTailnet, Listen: ":70700"}, "want :PORT"},
		{server.Config{Transport: server.TransportTailnet}, "--ts-state-dir"},
		{server.Config{Transport: server.TransportTailnet, TLSCertFile: "c.pem", TLSKeyFile: "k.pem"}, "for the local transport"},
		{server.Config{Token: tok, Listen: "0.0.0.0:7070"}, "--allow-non-loopback"},
		// Off loopback the local transport wants TLS, or to be told that
		// something else encrypts.
		{server.Config{Token: tok, Listen: "0.0.0.0:7070", AllowNonLoopback: true}, "--tls-cert and --tls-key"},
		{server.Config{Token: tok, Listen: "0.0.0.0:7070", AllowNonLoopback: true}, "--insecure-plaintext"},
		{server.Config{Token: tok, TLSCertFile: "c.pem"}, "both a certificate and its key"},
		{server.Config{Token: tok}, ""},
	} {
		tc.cfg.DatabaseURL = "postgres://unused"
		if tc.says == "" {
			tc.cfg.DatabaseURL, tc.says = "", "PODIUM_DATABASE_URL"
		}
		_, err := server.New(ctx, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v): %v, want an error saying %q", tc.cfg, err, tc.says)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// /healthz says the process serves; /readyz says whether it can do its work,
// which it cannot while Postgres does not answer, and says so; it is ready
// again when Postgres is back. It names the dependency, not the driver's
// error. Neither needs the API token, nor does /metrics.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	if code, body := get(t, r.URL()+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	// Ready once the lease connection and the listener are up, which Run
	// opens after the replica starts serving.
	var ready string
	wait.For(t, 30*time.Second, "/readyz with Postgres up and no object store configured to answer ready", func() bool {
		code, body := get(t, r.URL()+"/readyz")
		ready = body
		return code == http.StatusOK && strings.HasPrefix(body, "ready\n")
	})
	// Below "ready", which optional parts are on, and how to turn on the
	// others: this replica has none of them.
	for _, want := range []string{
		"\noptional parts:\n",
		"\n  secrets: off (set --secrets-key-file, PODIUM_SECRETS_KEY_FILE)\n",
		"\n  object store for artifacts and log archives: off (set --s3-endpoint, PODIUM_S3_ENDPOINT;",
		"\n  apt repository and /install.sh: off (no package directory is set (--apt-dir, PODIUM_APT_DIR))\n",
		"\n  tailnet: off (the local transport:",
		"\n  TLS: off (set --tls-cert and --tls-key, or serve on a tailnet)\n",
	} {
		if !strings.Contains(ready, want) {
			t.Errorf("/readyz answered %q, want it to say %q", ready, want)
		}
	}
	if code, _ := get(t, r.URL()+"/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}

	// Postgres stops answering for this database: refuse new connections and
	// end the ones the replica has.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, q := range []string{
		`alter database "` + db.Name + `" allow_connections false`,
		`select pg_terminate_backend(pid) from pg_stat_activity where datname = '` + db.Name + `'`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var body string
	wait.For(t, 30*time.Second, "/readyz to say Postgres does not answer", func() bool {
		var code int
		code, body = get(t, r.URL()+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "Postgres does not answer")
	})
	// Which dependency, not the driver's words: those name the socket, the
	// user and the database, and /readyz answers anyone.
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{u.Query().Get("host"), db.Name, "postgres@", "FATAL", "SQLSTATE"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz says %q, which gives away %q", body, secret)
		}
	}
	if code, _ := get(t, r.URL()+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while Postgres is away: %d, want 200 (the process still serves)", code)
	}
	if _, err := admin.Exec(ctx, `alter database "`+db.Name+`" allow_connections true`); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "/readyz to be ready again once Postgres is back", func() bool {
		code, _ := get(t, r.URL()+"/readyz")
		return code == http.StatusOK
	})
}

// /readyz is not ready while the replica's lease connection or its doorbell
// listener is down, though Postgres answers its pool: a replica without its
// lease can take no node's stream, one without its listener hears no
// doorbell. It is ready again once each is back. New connections to the
// database are refused while the one connection is killed, so it stays down
// until the test lets it back.
func TestReadinessWaitsForLeaseAndListener(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ready := func() bool {
		code, _ := get(t, r.URL()+"/readyz")
		return code == http.StatusOK
	}
	wait.For(t, 30*time.Second, "/readyz to answer ready", ready)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	allow := func(yes bool) {
		t.Helper()
		q := `alter database "` + db.Name + `" allow_connections ` + map[bool]string{true: "true", false: "false"}[yes]
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer allow(true)
	for _, c := range []struct{ name, pid, says string }{
		{"the lease connection", "", "lease connection"},
		{"the listener", `select pid from pg_stat_activity where datname = $1 and query ilike 'listen %'`, "doorbell listener"},
	} {
		var pid uint32
		if c.pid == "" {
			l, err := r.Leases().Current(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pid = l.PID()
		} else if err := admin.QueryRow(ctx, c.pid, db.Name).Scan(&pid); err != nil {
			t.Fatalf("find %s's backend: %v", c.name, err)
		}
		allow(false)
		if _, err := admin.Exec(ctx, "select pg_terminate_backend($1)", int(pid)); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, "/readyz to say "+c.name+" is down", func() bool {
			code, body := get(t, r.URL()+"/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, c.says)
		})
		// Still not ready while it cannot come back: the pool answers, the
		// killed connection does not.
		if code, body := get(t, r.URL()+"/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz while %s cannot reconnect: %d %q", c.name, code, body)
		}
		allow(true)
		wait.For(t, 30*time.Second, "/readyz to be ready once "+c.name+" is back", ready)
	}
}
