package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/admin"
	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/console"
	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/coordinator/webhooks"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const bootstrap = "bootstrap-token-0123456789abcdef0123456789"

// env is a console on a real Postgres, with the task and admin services it
// calls, a node holding a session, and three people: alice (member), bob
// (member), vera (viewer) and ada (admin).
type env struct {
	t      *testing.T
	st     *store.Store
	sql    *pgxpool.Pool
	srv    *httptest.Server
	node   string
	epoch  int64
	tokens map[string]string
}

func newEnv(t *testing.T, tls bool) *env {
	t.Helper()
	return newEnvWith(t, tls, "")
}

// newEnvWith is newEnv with the console's public URL (console.Config).
func newEnvWith(t *testing.T, tls bool, publicURL string) *env {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b := bus.New(bus.Config{DatabaseURL: db.URL, Channels: []string{store.ChannelTaskEvents}}, bus.Deps{Log: log})
	bctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(bctx) }()
	t.Cleanup(func() { stop(); <-done })
	svc := tasks.NewService(tasks.Deps{Store: st, Bus: b, Log: log})
	// Its submit batcher, for the forms that submit (rerun).
	sctx, stopSvc := context.WithCancel(ctx)
	svcDone := make(chan struct{})
	go func() { defer close(svcDone); _ = svc.Run(sctx) }()
	t.Cleanup(func() { stopSvc(); <-svcDone })
	adm := admin.NewService(admin.Config{Transport: "local"}, admin.Deps{Store: st, Log: log})
	con := console.New(console.Config{Transport: "local", Token: bootstrap, MaxFollow: time.Minute, PublicURL: publicURL,
		Optional: "optional parts:\n  secrets: on\n  TLS: off (set --tls-cert and --tls-key, or serve on a tailnet)\n"},
		console.Deps{Store: st, Tasks: svc, Admin: adm, Bus: b, Log: log,
			Schedules: cron.NewService(cron.Config{}, cron.Deps{Store: st, Log: log}), Webhooks: webhooks.NewService(webhooks.Deps{Store: st, Log: log})})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(con)
	} else {
		srv = httptest.NewServer(con)
	}
	t.Cleanup(srv.Close)
	t.Cleanup(con.Shutdown)
	e := &env{t: t, st: st, sql: pool, srv: srv, tokens: map[string]string{}}
	for name, role := range map[string]string{"alice": "member", "bob": "member", "vera": "viewer", "ada": "admin"} {
		tok := "tok-" + name + "-0123456789abcdef0123456789abcdef"
		h := sha256.Sum256([]byte(tok))
		if _, err := st.AddUser(ctx, name, role, h[:], "test"); err != nil {
			t.Fatal(err)
		}
		e.tokens[name] = tok
	}
	// A node, behind the store's back: enrolling one takes a device.
	e.node = ids.New("node")
	if _, err := pool.Exec(ctx, "insert into podium.nodes (id, key_hash, hostname) values ($1, '\\x00', 'host-1')", e.node); err != nil {
		t.Fatal(err)
	}
	n, err := st.StartSession(ctx, store.SessionStart{NodeID: e.node, Replica: "r1", MaxTasks: 100})
	if err != nil {
		t.Fatal(err)
	}
	e.epoch = n.SessionEpoch
	return e
}

// task stores a task submitted by who and, with run, places it on the node
// and makes it running.
func (e *env) task(who string, spec *podiumv1.TaskSpec, run bool) string {
	e.t.Helper()
	ctx := context.Background()
	id := ids.New("task")
	if _, err := e.st.InsertTasks(ctx, []store.NewTask{{ID: id, Spec: spec, RequestedBy: who}}); err != nil {
		e.t.Fatal(err)
	}
	if !run {
		return id
	}
	placed, _, err := e.st.DispatchPass(ctx, 100, func(store.Claimed) store.Verdict { return store.Verdict{NodeID: e.node} })
	if err != nil || len(placed) == 0 {
		e.t.Fatalf("place %s: %v (%d placed)", id, err, len(placed))
	}
	e.events(id, 1, status(podiumv1.TaskState_TASK_STATE_PROVISIONING), status(podiumv1.TaskState_TASK_STATE_RUNNING))
	return id
}

// events stores a running task's events from seq on, as its node would.
func (e *env) events(id string, seq uint64, evs ...*podiumv1.TaskEvent) {
	e.t.Helper()
	for i, ev := range evs {
		ev.Seq = seq + uint64(i)
	}
	if _, err := e.st.IngestEvents(context.Background(), e.node, e.epoch, id, 1, evs); err != nil {
		e.t.Fatal(err)
	}
	_ = e.st.Notify(context.Background(), store.ChannelTaskEvents, id)
}

func status(s podiumv1.TaskState) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{State: s}}}
}

func out(text string) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Log{Log: &podiumv1.LogChunk{Stream: podiumv1.LogStream_LOG_STREAM_STDOUT, Data: []byte(text)}}}
}

// client is a browser: cookies kept, redirects not followed (the tests look
// at them).
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client() // a copy: the server's client is shared
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// get fetches path and returns the status and body.
func get(t *testing.T, c *http.Client, base, path string) (*http.Response, string) {
	t.Helper()
	res, err := c.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func post(t *testing.T, c *http.Client, base, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	res, err := c.PostForm(base+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", body)
	}
	return m[1]
}

// login signs in with token and returns the browser.
func (e *env) login(token string) *http.Client {
	e.t.Helper()
	c := e.client()
	_, body := get(e.t, c, e.srv.URL, "/console/login")
	res, body := post(e.t, c, e.srv.URL, "/console/login", url.Values{"token": {token}, "csrf": {csrfOf(e.t, body)}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/" {
		e.t.Fatalf("sign-in: %s (Location %q), want 303 to /console/:\n%s", res.Status, res.Header.Get("Location"), body)
	}
	return c
}

func (e *env) as(name string) *http.Client { return e.login(e.tokens[name]) }

// A personal token and the bootstrap token sign in, with a session cookie
// that scripts cannot read and other sites cannot send; a wrong token is
// refused with 401; signing out ends the session.
func TestLoginGoodAndBad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := e.client()
	res, _ := get(t, c, e.srv.URL, "/console/")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/login" {
		t.Fatalf("GET /console/ signed out: %s %q, want 303 to /console/login", res.Status, res.Header.Get("Location"))
	}
	res, body := get(t, c, e.srv.URL, "/console/login")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="login"`) || !strings.Contains(body, `type="password"`) {
		t.Fatalf("login page: %s\n%s", res.Status, body)
	}
	csrf := csrfOf(t, body)
	res, body = post(t, c, e.srv.URL, "/console/login", url.Values{"token": {"not-a-token"}, "csrf": {csrf}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `class="error"`) || !strings.Contains(body, "token not recognised") {
		t.Fatalf("bad token: %s, want 401 saying the token is not recognised:\n%s", res.Status, body)
	}
	res, _ = post(t, c, e.srv.URL, "/console/login", url.Values{"token": {e.tokens["alice"]}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without csrf: %s, want 403", res.Status)
	}
	res, _ = post(t, c, e.srv.URL, "/console/login", url.Values{"token": {e.tokens["alice"]}, "csrf": {csrf}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("good token: %s, want 303", res.Status)
	}
	var session *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == "podium_console" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/console" || session.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/console, not Secure over plain HTTP", session)
	}
	res, body = get(t, c, e.srv.URL, "/console/")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `<span id="whoami">alice</span>`) || !strings.Contains(body, `<span id="role">member</span>`) {
		t.Fatalf("tasks page as alice: %s\n%s", res.Status, body)
	}
	// The session id is not what is stored.
	var stored int
	if err := e.sql.QueryRow(context.Background(), "select count(*) from podium.console_sessions where id_hash = $1",
		[]byte(session.Value)).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("a session row keyed by the raw id: %d (%v)", stored, err)
	}
	res, _ = post(t, c, e.srv.URL, "/console/logout", url.Values{"csrf": {csrfOf(t, body)}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %s", res.Status)
	}
	if res, _ = get(t, c, e.srv.URL, "/console/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("after signing out: %s, want 303 to the login page", res.Status)
	}

	admin := e.login(bootstrap)
	_, body = get(t, admin, e.srv.URL, "/console/")
	if !strings.Contains(body, `<span id="whoami">bootstrap token</span>`) || !strings.Contains(body, `<span id="role">admin</span>`) {
		t.Fatalf("header for the bootstrap token:\n%s", body)
	}
	// Removing a user ends their sessions at once.
	bob := e.as("bob")
	if err := e.st.RemoveUser(context.Background(), "bob"); err != nil {
		t.Fatal(err)
	}
	if res, _ := get(t, bob, e.srv.URL, "/console/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a removed user's session: %s, want 303 to the login page", res.Status)
	}
	// So does rotating a user's token: the session was signed in with the
	// old one (podium user rotate-token).
	alice := e.as("alice")
	if res, _ := get(t, alice, e.srv.URL, "/console/"); res.StatusCode != http.StatusOK {
		t.Fatalf("alice's session before her token is rotated: %s", res.Status)
	}
	if _, err := e.st.SetUserToken(context.Background(), "alice", []byte("a new token's hash, 32 bytes...!")); err != nil {
		t.Fatal(err)
	}
	if res, _ := get(t, alice, e.srv.URL, "/console/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a session signed in with a rotated token: %s, want 303 to the login page", res.Status)
	}
}

// Over TLS the session cookie is Secure.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	c := e.client()
	_, body := get(t, c, e.srv.URL, "/console/login")
	res, _ := post(t, c, e.srv.URL, "/console/login", url.Values{"token": {e.tokens["ada"]}, "csrf": {csrfOf(t, body)}})
	for _, ck := range res.Cookies() {
		if ck.Name == "podium_console" {
			if !ck.Secure || !ck.HttpOnly {
				t.Fatalf("session cookie over TLS %+v: want Secure and HttpOnly", ck)
			}
			return
		}
	}
	t.Fatalf("no session cookie: %s", res.Status)
}

// Every console response carries the strict CSP and the other headers.
func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := e.as("ada")
	for _, p := range []string{"/console/login", "/console/", "/console/nodes", "/console/queue", "/console/static/console.css",
		"/console/static/console.js", "/console/nope", "/console/?state=bogus"} {
		res, _ := get(t, c, e.srv.URL, p)
		h := res.Header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", p, h)
		}
	}
}

// A POST without the session's CSRF token, or with another, is refused with
// 403 and changes nothing; with it, the cancel goes through.
func TestCSRFRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	alice := e.as("alice")
	_, body := get(t, alice, e.srv.URL, "/console/tasks/"+id)
	if !strings.Contains(body, `id="cancel-button"`) {
		t.Fatalf("the owner sees no cancel button:\n%s", body)
	}
	csrf := csrfOf(t, body)
	other := e.as("alice") // another session: another token
	_, otherBody := get(t, other, e.srv.URL, "/console/tasks/"+id)
	for _, bad := range []url.Values{{}, {"csrf": {"00" + csrf[2:]}}, {"csrf": {csrfOf(t, otherBody)}}} {
		if csrfOf(t, otherBody) == csrf {
			t.Fatal("two sessions share a CSRF token")
		}
		res, _ := post(t, alice, e.srv.URL, "/console/tasks/"+id+"/cancel", bad)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("cancel with csrf %v: %s, want 403", bad, res.Status)
		}
	}
	if tk, _ := e.st.GetTask(context.Background(), id); tk.CancelRequestedAt != nil {
		t.Fatal("a refused form cancelled the task")
	}
	res, _ := post(t, alice, e.srv.URL, "/console/tasks/"+id+"/cancel", url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/tasks/"+id {
		t.Fatalf("cancel: %s %q", res.Status, res.Header.Get("Location"))
	}
	if tk, _ := e.st.GetTask(context.Background(), id); tk.CancelRequestedAt == nil && tk.State != store.Cancelled {
		t.Fatalf("the cancel did not reach the task: %s", tk.State)
	}
}

// Output is text: a task printing <script> shows it escaped, and ANSI
// colours become terminal-to-html's classes.
func TestOutputEscapedAndColoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	e.events(id, 3, out("<script>alert('x')</script>\n\x1b[31mred\x1b[0m plain\n"))
	_, body := get(t, e.as("vera"), e.srv.URL, "/console/tasks/"+id)
	if strings.Contains(body, "<script>alert") {
		t.Fatalf("task output reached the page as markup:\n%s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;alert(") {
		t.Fatalf("the escaped script is not shown:\n%s", body)
	}
	if !regexp.MustCompile(`<span class="[^"]*fg31[^"]*">red</span>`).MatchString(body) {
		t.Fatalf("no fg31 span for the red text:\n%s", body)
	}
}

// What a page offers follows the roles: a member sees no drain button, a
// viewer no cancel button, a member none on someone else's task; a viewer's
// cancel is refused.
func TestRolesDecideTheButtons(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	_, body := get(t, e.as("ada"), e.srv.URL, "/console/nodes")
	if !strings.Contains(body, `data-node-id="`+e.node+`"`) || !strings.Contains(body, `class="drain"`) {
		t.Fatalf("an admin sees no drain button:\n%s", body)
	}
	_, body = get(t, e.as("alice"), e.srv.URL, "/console/nodes")
	if !strings.Contains(body, `data-node-id="`+e.node+`"`) || strings.Contains(body, `class="drain"`) || strings.Contains(body, `class="undrain"`) {
		t.Fatalf("a member's nodes page (want the node, no drain button):\n%s", body)
	}
	vera := e.as("vera")
	_, body = get(t, vera, e.srv.URL, "/console/tasks/"+id)
	if strings.Contains(body, "cancel-button") || strings.Contains(body, `id="message"`) {
		t.Fatalf("a viewer sees the cancel or message form:\n%s", body)
	}
	res, _ := post(t, vera, e.srv.URL, "/console/tasks/"+id+"/cancel", url.Values{"csrf": {csrfOf(t, body)}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a viewer's cancel: %s, want 403", res.Status)
	}
	bob := e.as("bob")
	_, body = get(t, bob, e.srv.URL, "/console/tasks/"+id)
	if strings.Contains(body, "cancel-button") {
		t.Fatalf("a member sees the cancel button on someone else's task:\n%s", body)
	}
	res, _ = post(t, bob, e.srv.URL, "/console/nodes/"+e.node+"/drain", url.Values{"csrf": {csrfOf(t, body)}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a member's drain: %s, want 403", res.Status)
	}
	ada := e.as("ada")
	_, body = get(t, ada, e.srv.URL, "/console/nodes")
	res, _ = post(t, ada, e.srv.URL, "/console/nodes/"+e.node+"/drain", url.Values{"csrf": {csrfOf(t, body)}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("an admin's drain: %s, want 303", res.Status)
	}
	if n, err := e.st.GetNode(context.Background(), e.node); err != nil || !n.Draining {
		t.Fatalf("the node is not draining after an admin's drain (%v)", err)
	}
}

// Env values are hidden from everyone but the task's owner and admins.
func TestEnvValuesHiddenForNonOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox", Env: map[string]string{"API_KEY": "hunter2-secret"}}, false)
	for who, shown := range map[string]bool{"alice": true, "ada": true, "bob": false, "vera": false} {
		_, body := get(t, e.as(who), e.srv.URL, "/console/tasks/"+id)
		if !strings.Contains(body, `id="spec"`) || !strings.Contains(body, "API_KEY") {
			t.Fatalf("%s: no spec with the variable's name:\n%s", who, body)
		}
		if got := strings.Contains(body, "hunter2-secret"); got != shown {
			t.Errorf("%s sees the value: %t, want %t", who, got, shown)
		}
		if !shown && !strings.Contains(body, "•••") {
			t.Errorf("%s: the hidden value is not shown as •••", who)
		}
	}
}

var lineRE = regexp.MustCompile(`<div class="line (stdout|stderr|note)" id="L(\d+)"><a href="#L\d+" class="ln">\d+</a><span class="text">([^<]*)</span></div>`)

// A long log pages from the server: the task page shows its last 1,000
// lines and a link to earlier ones; the fragment answers exactly the lines
// asked for, with a line split across chunks whole.
func TestLogPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	var evs []*podiumv1.TaskEvent
	var chunk strings.Builder
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&chunk, "line %d\n", i)
		if i%100 == 0 {
			evs = append(evs, out(chunk.String()))
			chunk.Reset()
		}
	}
	evs = append(evs, out("half a "), out("line\n"))
	e.events(id, 3, evs...)
	// The log starts with podium's notes (placed, provisioning, running):
	// line k of the output is line k+notes of the log.
	c := e.as("vera")
	_, frag := get(t, c, e.srv.URL, "/console/tasks/"+id+"/log?from=1&limit=10")
	notes := -1
	for _, l := range lineRE.FindAllStringSubmatch(frag, -1) {
		if l[3] == "line 1" {
			notes, _ = strconv.Atoi(l[2])
			notes--
		}
	}
	if notes < 0 {
		t.Fatalf("no \"line 1\" in the log's first lines:\n%s", frag)
	}
	total := 2500 + 1 + notes
	_, body := get(t, c, e.srv.URL, "/console/tasks/"+id)
	ls := lineRE.FindAllStringSubmatch(body, -1)
	if len(ls) != console.PageLines {
		t.Fatalf("the task page shows %d lines, want %d", len(ls), console.PageLines)
	}
	firstN := total - console.PageLines + 1
	if first, last := ls[0], ls[len(ls)-1]; first[2] != strconv.Itoa(firstN) || last[2] != strconv.Itoa(total) ||
		last[3] != "half a line" || first[3] != fmt.Sprintf("line %d", firstN-notes) {
		t.Fatalf("the page shows lines %s (%q) to %s (%q), want %d to %d (half a line)", first[2], first[3], last[2], last[3], firstN, total)
	}
	for i, l := range ls {
		if l[2] != strconv.Itoa(firstN+i) {
			t.Fatalf("line %d of the page is numbered %s", i, l[2])
		}
	}
	if !strings.Contains(body, fmt.Sprintf(`id="log-earlier" href="/console/tasks/%s?from=%d#log"`, id, firstN-console.PageLines)) {
		t.Fatalf("no link to the earlier lines:\n%s", body[strings.Index(body, "log-tools"):][:600])
	}
	res, frag := get(t, c, e.srv.URL, "/console/tasks/"+id+"/log?from=10&limit=5")
	ls = lineRE.FindAllStringSubmatch(frag, -1)
	if res.StatusCode != http.StatusOK || len(ls) != 5 || ls[0][2] != "10" || ls[0][3] != fmt.Sprintf("line %d", 10-notes) || ls[4][2] != "14" {
		t.Fatalf("log?from=10&limit=5: %s, lines %v", res.Status, ls)
	}
	if ls := lineRE.FindAllStringSubmatch(get2(t, c, e.srv.URL+"/console/tasks/"+id+"?from=1"), -1); len(ls) != console.PageLines || ls[0][2] != "1" || ls[0][1] != "note" {
		t.Fatalf("?from=1 shows %d lines from %v", len(ls), ls[0])
	}
	for _, bad := range []string{"/log?from=0", "/log?from=x", "/log?from=1&limit=100000", "/log"} {
		if res, _ := get(t, c, e.srv.URL, "/console/tasks/"+id+bad); res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s, want 400", bad, res.Status)
		}
	}
	res, raw := get(t, c, e.srv.URL, "/console/tasks/"+id+"/log.raw")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(res.Header.Get("Content-Disposition"), "attachment") || !strings.Contains(raw, "line 2500\nhalf a line\n") {
		t.Fatalf("raw log: %s %v, ends %q", res.Status, res.Header, raw[max(0, len(raw)-80):])
	}
}

func get2(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// A query parameter that is not valid is a 400 page naming it.
func TestBadQueryParameterIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := e.as("vera")
	for q, name := range map[string]string{"state=bogus": "state", "user=%21%21": "user", "label=a%3D%3D%3Db%20c": "label",
		"node=nope": "node", "after=x": "after", "colour=red": "colour"} {
		res, body := get(t, c, e.srv.URL, "/console/?"+q)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "&#34;"+name+"&#34;") {
			t.Errorf("?%s: %s, want 400 naming %q:\n%s", q, res.Status, name, body)
		}
	}
	if res, _ := get(t, c, e.srv.URL, "/console/tasks/not-a-task"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad task id: %s, want 400", res.Status)
	}
	if res, _ := get(t, c, e.srv.URL, "/console/tasks/"+ids.New("task")); res.StatusCode != http.StatusNotFound {
		t.Errorf("a task that is not there: %s, want 404", res.Status)
	}
}

// The tasks page lists newest first with why a queued task waits, and the
// queue page groups the waiting by reason.
func TestTasksAndQueuePages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	running := e.task("alice", &podiumv1.TaskSpec{Image: "busybox", Name: "unit-tests"}, true)
	queued := e.task("bob", &podiumv1.TaskSpec{Image: "busybox", Labels: []string{"gpu"}}, false)
	if _, err := e.sql.Exec(context.Background(), "update podium.tasks set reason = 'no node has label gpu' where id = $1", queued); err != nil {
		t.Fatal(err)
	}
	c := e.as("vera")
	_, body := get(t, c, e.srv.URL, "/console/")
	iq, ir := strings.Index(body, `data-task-id="`+queued+`"`), strings.Index(body, `data-task-id="`+running+`"`)
	if iq < 0 || ir < 0 || iq > ir {
		t.Fatalf("want both tasks, the newest first:\n%s", body)
	}
	if !regexp.MustCompile(`data-task-id="` + queued + `">\s*<td class="id">.*</td>\s*<td class="name"></td>\s*<td class="state state-queued">queued</td>\s*<td class="why">no node has label gpu</td>`).MatchString(body) {
		t.Fatalf("the queued task's row lacks its state or why:\n%s", body)
	}
	if !regexp.MustCompile(`data-task-id="` + running + `">\s*<td class="id">.*</td>\s*<td class="name">unit-tests</td>`).MatchString(body) {
		t.Fatalf("the running task's row lacks its name:\n%s", body)
	}
	_, body = get(t, c, e.srv.URL, "/console/?name=unit-tests")
	if strings.Contains(body, queued) || !strings.Contains(body, running) {
		t.Fatalf("name=unit-tests lists the wrong tasks:\n%s", body)
	}
	if resp, body := get(t, c, e.srv.URL, "/console/?name=unit+tests"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "is not a task name") {
		t.Fatalf("name=unit tests: %d\n%s", resp.StatusCode, body)
	}
	_, body = get(t, c, e.srv.URL, "/console/tasks/"+running)
	if !regexp.MustCompile(`<dt>Name</dt><dd>unit-tests</dd>`).MatchString(body) {
		t.Fatalf("the task page does not show the name:\n%s", body)
	}
	_, body = get(t, c, e.srv.URL, "/console/?state=running")
	if strings.Contains(body, queued) || !strings.Contains(body, running) {
		t.Fatalf("state=running lists the wrong tasks:\n%s", body)
	}
	_, rows := get(t, c, e.srv.URL, "/console/?fragment=rows&user=bob")
	if strings.Contains(rows, "<html") || !strings.Contains(rows, queued) || strings.Contains(rows, running) {
		t.Fatalf("the rows fragment for user=bob:\n%s", rows)
	}
	_, body = get(t, c, e.srv.URL, "/console/queue")
	if !regexp.MustCompile(`<tr data-reason="no node has label gpu">.*<td class="count">1</td>`).MatchString(body) {
		t.Fatalf("queue page:\n%s", body)
	}
	_, body = get(t, c, e.srv.URL, "/console/nodes/"+e.node)
	if !strings.Contains(body, running) || strings.Contains(body, queued) {
		t.Fatalf("node page lists the wrong tasks:\n%s", body)
	}
}

// The live log sends the lines written after the page, then the end.
func TestLiveLogFollowsTheTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	e.events(id, 3, out("first\n"))
	c := e.as("vera")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/console/tasks/"+id+"/events?line=1", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: %s %q", res.Status, ct)
	}
	r := bufio.NewReader(res.Body)
	next := func(want string) string {
		t.Helper()
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("the event stream ended waiting for %q: %v", want, err)
			}
			if strings.Contains(l, want) {
				return l
			}
		}
	}
	next(`<span class="text">first</span>`)
	e.events(id, 4, out("second\n"))
	next(`<span class="text">second</span>`)
	zero := int32(0)
	done := status(podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	done.GetStatus().ExitCode = &zero
	e.events(id, 5, done)
	next("succeeded 0")
	next("event: end")
	wait.For(t, 10*time.Second, "the task to succeed", func() bool {
		tk, _ := e.st.GetTask(context.Background(), id)
		return tk.State == store.Succeeded
	})
}

// A replica serves the console at /console/ and sends / there.
func TestReplicaMountsTheConsole(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(r.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /: %s %q, want 303 to /console/", res.Status, res.Header.Get("Location"))
	}
	res, body := get(t, c, r.URL(), "/console/login")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="login"`) {
		t.Fatalf("GET /console/login: %s", res.Status)
	}
	jar, _ := cookiejar.New(nil)
	c.Jar = jar
	_, body = get(t, c, r.URL(), "/console/login")
	res, _ = post(t, c, r.URL(), "/console/login", url.Values{"token": {coordtest.Token}, "csrf": {csrfOf(t, body)}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in with the replica's token: %s", res.Status)
	}
}

// The message form puts the text in the task's inbox, for its owner; the
// change is in the audit log, as the CLI's is.
func TestMessageReachesTheInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	alice := e.as("alice")
	_, body := get(t, alice, e.srv.URL, "/console/tasks/"+id)
	if !strings.Contains(body, `id="message-button"`) || !strings.Contains(body, `name="text"`) {
		t.Fatalf("the owner has no message form:\n%s", body)
	}
	res, _ := post(t, alice, e.srv.URL, "/console/tasks/"+id+"/message", url.Values{"csrf": {csrfOf(t, body)}, "text": {"hello <task>"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("message: %s, want 303", res.Status)
	}
	cmds, err := e.st.PendingCommandsFor(context.Background(), []string{e.node})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cmds {
		if c.TaskID == id && c.Kind == "inject" && c.Text == "hello <task>" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no message command for the node: %+v", cmds)
	}
	rows, err := e.st.ListAudit(context.Background(), time.Now().Add(-time.Hour), "alice", 10)
	if err != nil || len(rows) == 0 || rows[0].Action != "TaskService.Send" || rows[0].Target != id {
		t.Fatalf("audit rows for alice: %+v (%v), want TaskService.Send on %s", rows, err, id)
	}
}

// A task's page words its end as podium run does, each thing once ("failed:
// exit code 3", never "failed (exit code 3): exit code 3"), and shows its
// CPU and wall time alike in the attempts table and the usage box, as
// podium task get writes them (a short task's 0.03 s of CPU is not "0.0 s").
func TestTaskPageWordsItsEndOnceAndItsUsageAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	cpu, peak, wall := 0.034, int64(4<<20), 1.26
	end := status(podiumv1.TaskState_TASK_STATE_FAILED)
	end.GetStatus().ExitCode, end.GetStatus().Reason = ptrTo(int32(3)), "exit code 3"
	end.GetStatus().Usage = &podiumv1.Usage{CpuSeconds: &cpu, PeakMemoryBytes: &peak, WallSeconds: &wall}
	e.events(id, 3, out("done\n"), end)
	_, body := get(t, e.as("alice"), e.srv.URL, "/console/tasks/"+id)
	if !strings.Contains(body, `<span class="text">→ failed: exit code 3</span>`) || strings.Contains(body, "(exit code 3)") ||
		strings.Contains(body, "exit code 3: exit code 3") {
		t.Errorf("the task's end is not worded once, as \"failed: exit code 3\":\n%s", body)
	}
	row := regexp.MustCompile(`<td>([^<]*)</td><td>[^<]*</td><td>([^<]*)</td>`).FindStringSubmatch(body)
	box := regexp.MustCompile(`<dt>CPU time</dt><dd>([^<]*)</dd>[\s\S]*?<dt>Wall time</dt><dd>([^<]*)</dd>`).FindStringSubmatch(body)
	if row == nil || box == nil || row[1] != "0.03 s" || box[1] != "0.03 s" || row[2] != box[2] {
		t.Errorf("attempts table %q, usage box %q: want CPU 0.03 s in both and the same wall time:\n%s", row, box, body)
	}
}

func ptrTo[T any](v T) *T { return &v }

// A finished task's page offers "Run again" to its owner and to admins, as
// podium task rerun does: the new task is queued with the same spec, rerun
// of the old one, and the browser goes to it. A running task has no such
// button; another member sees none on someone else's task, and a post of
// theirs is refused as the API refuses it, leaving no new task.
func TestRerunButton(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox", Command: []string{"true"}}, true)
	alice := e.as("alice")
	if _, body := get(t, alice, e.srv.URL, "/console/tasks/"+id); strings.Contains(body, "rerun-button") {
		t.Fatalf("a running task offers to run again:\n%s", body)
	}
	e.events(id, 3, status(podiumv1.TaskState_TASK_STATE_SUCCEEDED))
	bob := e.as("bob")
	_, body := get(t, bob, e.srv.URL, "/console/tasks/"+id)
	if strings.Contains(body, "rerun-button") {
		t.Fatalf("a member sees the rerun button on someone else's task:\n%s", body)
	}
	if res, _ := post(t, bob, e.srv.URL, "/console/tasks/"+id+"/rerun", url.Values{"csrf": {csrfOf(t, body)}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("another member's rerun: %s, want 403", res.Status)
	}
	_, body = get(t, alice, e.srv.URL, "/console/tasks/"+id)
	if !strings.Contains(body, "rerun-button") {
		t.Fatalf("the owner sees no rerun button on her finished task:\n%s", body)
	}
	res, _ := post(t, alice, e.srv.URL, "/console/tasks/"+id+"/rerun", url.Values{"csrf": {csrfOf(t, body)}})
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/tasks/task_") || loc == "/console/tasks/"+id {
		t.Fatalf("the owner's rerun: %s to %q, want 303 to the new task", res.Status, loc)
	}
	nt, err := e.st.GetTask(context.Background(), strings.TrimPrefix(loc, "/console/tasks/"))
	if err != nil || nt.RerunOf == nil || *nt.RerunOf != id || nt.RequestedBy != "alice" || nt.State != store.Queued || nt.Spec.GetCommand()[0] != "true" {
		t.Fatalf("the new task: %+v (%v); want alice's, queued, rerun of %s with the same spec", nt, err, id)
	}
	var n int
	if err := e.sql.QueryRow(context.Background(), "select count(*) from podium.tasks where rerun_of = $1", id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d reruns of the task stored (%v), want 1: the refused one made none", n, err)
	}
}

// The system page shows an admin the replica's version and which optional
// parts are on, with the setting that turns on each that is off, as /readyz
// lists them; the header links it for admins only, and anyone else is
// refused it with who to ask.
func TestSystemPageListsTheOptionalParts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ada := e.as("ada")
	res, body := get(t, ada, e.srv.URL, "/console/system")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `href="/console/system"`) {
		t.Fatalf("an admin's system page: %s\n%s", res.Status, body)
	}
	on := regexp.MustCompile(`<tr data-part="secrets"><th scope="row">secrets</th><td class="part-on">on</td><td class="how"></td></tr>`)
	off := regexp.MustCompile(`<tr data-part="TLS"><th scope="row">TLS</th><td class="part-off">off</td><td class="how">set --tls-cert and --tls-key, or serve on a tailnet</td></tr>`)
	if !on.MatchString(body) || !off.MatchString(body) {
		t.Errorf("the system page does not list secrets on and TLS off with how to turn it on:\n%s", body)
	}
	alice := e.as("alice")
	res, body = get(t, alice, e.srv.URL, "/console/system")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "ask an admin") {
		t.Errorf("a member's system page: %s, want 403 saying to ask an admin:\n%s", res.Status, body)
	}
	if _, body := get(t, alice, e.srv.URL, "/console/"); strings.Contains(body, `href="/console/system"`) {
		t.Errorf("a member's header links the system page")
	}
}

// The schedules, secrets and webhooks pages show what podium schedule ls,
// secret ls and webhook ls show each person, by the same rules: a member
// sees their own schedules and the secrets granted to them (no grants, never
// a value); an admin every schedule, every secret with who may use it, and
// the webhooks, which anyone else is refused; the header links each page to
// those who may open it.
func TestSchedulesSecretsAndWebhooksPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	ctx := context.Background()
	spec := &podiumv1.TaskSpec{Image: "busybox", Command: []string{"true"}}
	for _, sc := range []store.Schedule{
		{ID: ids.New("sched"), Name: "alice-nightly", Cron: "0 3 * * *", Timezone: "UTC", Spec: spec, Overlap: "skip", CreatedBy: "alice"},
		{ID: ids.New("sched"), Name: "bob-hourly", Cron: "0 * * * *", Timezone: "UTC", Spec: spec, Overlap: "skip", CreatedBy: "bob"},
	} {
		if _, err := e.st.CreateSchedule(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for _, sr := range []store.SecretRow{
		{Name: "alice-key", Ciphertext: []byte("sealed-value-a"), Nonce: make([]byte, 12), KeyID: "k", SetBy: "ada", Allow: []string{"alice"}},
		{Name: "prod-db", Ciphertext: []byte("sealed-value-b"), Nonce: make([]byte, 12), KeyID: "k", SetBy: "ada"},
	} {
		if _, err := e.st.PutSecret(ctx, sr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.AddWebhook(ctx, store.Webhook{ID: ids.New("hook"), Name: "ops", URL: "https://hooks.example.com/x",
		Events: []string{"task.finished"}, SecretName: "prod-db", CreatedBy: "ada"}, nil); err != nil {
		t.Fatal(err)
	}

	alice := e.as("alice")
	res, body := get(t, alice, e.srv.URL, "/console/schedules")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-schedule="alice-nightly"`) || strings.Contains(body, "bob-hourly") {
		t.Errorf("alice's schedules page (want hers, not bob's): %s\n%s", res.Status, body)
	}
	res, body = get(t, alice, e.srv.URL, "/console/secrets")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-secret="alice-key"`) || strings.Contains(body, "prod-db") ||
		strings.Contains(body, "sealed-value") || strings.Contains(body, "May be used by") {
		t.Errorf("alice's secrets page (want alice-key only, no grants, no value): %s\n%s", res.Status, body)
	}
	if res, _ := get(t, alice, e.srv.URL, "/console/webhooks"); res.StatusCode != http.StatusForbidden {
		t.Errorf("a member's webhooks page: %s, want 403", res.Status)
	}
	_, body = get(t, alice, e.srv.URL, "/console/")
	if !strings.Contains(body, `href="/console/schedules"`) || !strings.Contains(body, `href="/console/secrets"`) || strings.Contains(body, `href="/console/webhooks"`) {
		t.Errorf("a member's header should link schedules and secrets, not webhooks")
	}

	ada := e.as("ada")
	_, body = get(t, ada, e.srv.URL, "/console/schedules")
	if !strings.Contains(body, "alice-nightly") || !strings.Contains(body, "bob-hourly") {
		t.Errorf("an admin's schedules page lacks someone's schedule:\n%s", body)
	}
	_, body = get(t, ada, e.srv.URL, "/console/secrets")
	if !strings.Contains(body, `data-secret="prod-db"`) || !strings.Contains(body, "admins only") || !regexp.MustCompile(`data-secret="alice-key">.*<td>alice</td>`).MatchString(body) ||
		strings.Contains(body, "sealed-value") {
		t.Errorf("an admin's secrets page (want both, with who may use each, no value):\n%s", body)
	}
	res, body = get(t, ada, e.srv.URL, "/console/webhooks")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "https://hooks.example.com/x") || !strings.Contains(body, "task.finished") {
		t.Errorf("an admin's webhooks page: %s\n%s", res.Status, body)
	}
	vera := e.as("vera")
	_, body = get(t, vera, e.srv.URL, "/console/")
	if strings.Contains(body, `href="/console/schedules"`) || strings.Contains(body, `href="/console/secrets"`) {
		t.Errorf("a viewer's header links schedules or secrets, which a viewer may not list")
	}
	if res, _ := get(t, vera, e.srv.URL, "/console/secrets"); res.StatusCode != http.StatusForbidden {
		t.Errorf("a viewer's secrets page: %s, want 403", res.Status)
	}
}
