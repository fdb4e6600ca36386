package server_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// send makes one request to the replica with the Host given, as curl -H
// 'Host: …' would, and returns the status and body.
func send(t *testing.T, r *coordtest.Replica, method, path, host, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, r.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+coordtest.Token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// countRows counts a table's rows in the replica's database.
func countRows(t *testing.T, db pgtest.Database, table string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "select count(*) from "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A request whose Host is not one of the coordinator's (what a web page that
// rebinds its own name to the coordinator's address sends, or curl -H 'Host:
// evil.example') is refused with 421 before anything is done: no enrollment
// token made, no audit row of a call, and the answer names the host and the
// flag that would allow it. The coordinator's own names (loopback, the
// advertised and public URLs' hosts, --allowed-host) are answered, and the
// paths that any name may reach (the node API, health, the apt repository)
// stay open.
func TestOtherHostsAreMisdirected(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{PublicURL: "https://podium.example.com", AllowedHosts: []string{"proxy.internal"}})
	create := "/podium.v1.AdminService/CreateEnrollmentToken"

	for _, host := range []string{"evil.example", "evil.example:7070", "podium.example.com.evil.example", "10.1.2.3"} {
		code, body := send(t, r, http.MethodPost, create, host, "application/json", "{}")
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--allowed-host") || !strings.Contains(body, host) {
			t.Errorf("CreateEnrollmentToken with Host %s: %d %s; want 421 naming the host and --allowed-host", host, code, body)
		}
		code, body = send(t, r, http.MethodGet, "/console/", host, "", "")
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--allowed-host") {
			t.Errorf("GET /console/ with Host %s: %d %s; want 421", host, code, body)
		}
		code, body = send(t, r, http.MethodPost, "/podium.v1.AdminService/ListAudit", host, "application/json", "{}")
		if code != http.StatusMisdirectedRequest {
			t.Errorf("ListAudit with Host %s: %d %s; want 421", host, code, body)
		}
	}
	// A Connect client reads the reason from the answer.
	_, err := adminWithHost(r, "evil.example").WhoAmI(context.Background(), connect.NewRequest(&podiumv1.WhoAmIRequest{}))
	if err == nil || !strings.Contains(err.Error(), "does not answer for host") {
		t.Errorf("WhoAmI through a Connect client with Host evil.example: %v; want the refusal's reason", err)
	}
	// So does a streaming one (following a task's log), where its protocol
	// puts errors rather than in a unary JSON body.
	events, err := podiumv1connect.NewTaskServiceClient(&http.Client{Transport: hostRewriter{host: "evil.example", next: http.DefaultTransport}}, r.URL()).
		Events(context.Background(), connect.NewRequest(&podiumv1.EventsRequest{Id: "task_01J0000000000000000000000", Follow: true}))
	if err == nil {
		for events.Receive() {
		}
		err = events.Err()
		_ = events.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "does not answer for host") || connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Events through a streaming Connect client with Host evil.example: %v; want permission_denied with the refusal's reason", err)
	}
	if n := countRows(t, db, "podium.enrollment_tokens"); n != 0 {
		t.Errorf("%d enrollment tokens after refused calls, want 0", n)
	}
	audit, err := r.Admin().ListAudit(context.Background(), connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range audit.Msg.Entries {
		if e.Action == "AdminService.CreateEnrollmentToken" {
			t.Errorf("the audit log records %v for a refused call", e)
		}
	}

	for _, host := range []string{"localhost", "127.0.0.1", "[::1]:7070", r.Addr(), "podium.example.com", "PODIUM.example.com:443", "proxy.internal"} {
		if code, body := send(t, r, http.MethodPost, create, host, "application/json", "{}"); code != http.StatusOK {
			t.Errorf("CreateEnrollmentToken with Host %s: %d %s; want 200", host, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := send(t, r, http.MethodGet, path, "evil.example", "", ""); code != http.StatusOK {
			t.Errorf("GET %s with Host evil.example: %d %s; want 200 (probes dial any name)", path, code, body)
		}
	}
	// The node API proves itself with its node key, whatever name the node
	// was given: a wrong key is refused as such, not as another host.
	if code, body := send(t, r, http.MethodPost, "/podium.v1.NodeService/Enroll", "coordinator-1.internal", "application/json", `{"token":"nope"}`); code == http.StatusMisdirectedRequest {
		t.Errorf("the node API refused Host coordinator-1.internal: %d %s", code, body)
	}
}

// adminWithHost is an admin client whose requests carry Host host.
func adminWithHost(r *coordtest.Replica, host string) podiumv1connect.AdminServiceClient {
	c := &http.Client{Transport: hostRewriter{host: host, next: http.DefaultTransport}}
	return podiumv1connect.NewAdminServiceClient(c, r.URL())
}

type hostRewriter struct {
	host string
	next http.RoundTripper
}

func (h hostRewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Host = h.host
	req.Header.Set("Authorization", "Bearer "+coordtest.Token)
	return h.next.RoundTrip(req)
}

// A public URL or an allowed host that is not one is refused at start,
// naming the flag.
func TestBadHostFlagsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	for _, c := range []struct {
		public string
		hosts  []string
		flag   string
	}{
		{public: "podium.example.com", flag: "--public-url"},
		{public: "ftp://podium.example.com", flag: "--public-url"},
		{public: "https://", flag: "--public-url"},
		{public: "https://user:pw@podium.example.com", flag: "--public-url"},
		{hosts: []string{""}, flag: "--allowed-host"},
		{hosts: []string{"https://proxy.example"}, flag: "--allowed-host"},
		{hosts: []string{"proxy.example:8443"}, flag: "--allowed-host"},
		{hosts: []string{"a b"}, flag: "--allowed-host"},
		{hosts: []string{strings.Repeat("a", 64) + ".example"}, flag: "--allowed-host"},
		{hosts: []string{strings.Repeat("a.", 127) + "aa"}, flag: "--allowed-host"},
	} {
		_, err := server.New(context.Background(), server.Config{DatabaseURL: db.URL, Token: coordtest.Token,
			PublicURL: c.public, AllowedHosts: c.hosts})
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("public URL %q, allowed hosts %q: %v; want a refusal naming %s", c.public, c.hosts, err, c.flag)
		}
	}
}

// With --metrics-token-file, /metrics wants the token: none is 401, the
// right one 200. A token file that is missing, empty, short or more than a
// token is refused at start, naming the flag.
func TestMetricsTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef"
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{MetricsTokenFile: write("token", token+"\n")})
	get := func(auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, r.URL()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusUnauthorized || !strings.Contains(body, "--metrics-token-file") {
		t.Errorf("/metrics without the token: %d %s, want 401 naming --metrics-token-file", code, body)
	}
	if code, body := get("Bearer " + token); code != http.StatusOK || !strings.Contains(body, "podium_tasks") {
		t.Errorf("/metrics with the token: %d %s, want 200", code, body)
	}
	for _, c := range []struct{ path, says string }{
		{filepath.Join(dir, "absent"), "no such file"},
		{write("empty", ""), "holds 0 bytes"},
		{write("short", "tooshort\n"), "at least 32"},
		{write("two", token+" "+token), "more than one word"},
		{write("big", strings.Repeat("x", 5000)), "longer than 4096"},
		{dir, "not a regular file"},
		{fifo(t, dir), "not a regular file"},
		{loose(t, write("loose", token)), "readable by others"},
	} {
		_, err := server.New(context.Background(), server.Config{DatabaseURL: db.URL, Token: coordtest.Token, MetricsTokenFile: c.path})
		if err == nil || !strings.Contains(err.Error(), "--metrics-token-file") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("token file %s: %v; want a refusal naming --metrics-token-file saying %q", c.path, err, c.says)
		}
	}
}

// fifo makes a named pipe in dir: a token file that is one must be refused
// at once, not block the coordinator's start on a read nobody answers.
func fifo(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loose makes p readable by others than its owner.
func loose(t *testing.T, p string) string {
	t.Helper()
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
