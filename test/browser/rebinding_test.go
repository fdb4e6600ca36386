package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/server"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/test/testenv/pgtest"
	"github.com/podiumhq/podium/test/testenv/tailnettest"
)

// rebindingForwarder stands for the admin's machine on the tailnet and for
// an attacker's DNS name that resolves to it. Chromium reaches it on
// loopback, and it carries each connection on to one of two places: while
// the name still resolves to the attacker, to the attacker's own server;
// once the attacker rebinds it, through the admin's tailnet device to the
// coordinator, which then sees the admin's device calling, as it would for
// the admin's browser on their own laptop. A connection goes where the name
// points when its first bytes arrive, so a socket the browser opened early
// follows the rebinding as a fresh DNS answer would.
type rebindingForwarder struct {
	ln       net.Listener
	rebound  atomic.Bool
	attacker string // host:port of the attacker's server
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	coord    string // the coordinator's tailnet host:port
}

func (f *rebindingForwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(c)
	}
}

func (f *rebindingForwarder) forward(c net.Conn) {
	defer c.Close()
	first := make([]byte, 4096)
	n, err := c.Read(first)
	if err != nil {
		return
	}
	var up net.Conn
	if f.rebound.Load() {
		up, err = f.dial(context.Background(), "tcp", f.coord)
	} else {
		up, err = net.Dial("tcp", f.attacker)
	}
	if err != nil {
		return
	}
	defer up.Close()
	if _, err := up.Write(first[:n]); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// attackerPage is what the attacker's name first serves: a script that,
// once the name points at the coordinator, calls it from the page's own
// origin, so the browser lets it read every answer.
const attackerPage = `<!doctype html><title>Cute cats</title><h1>Cute cats</h1>
<script>
async function call(path, init) {
  try {
    const res = await fetch(path, init);
    return {status: res.status, body: (await res.text()).slice(0, 2000)};
  } catch (e) {
    return {status: 0, body: String(e)};
  }
}
window.attack = async function () {
  const json = {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"};
  const out = {};
  out.token = await call("/podium.v1.AdminService/CreateEnrollmentToken", json);
  out.audit = await call("/podium.v1.AdminService/ListAudit", json);
  out.console = await call("/console/queue", {});
  const csrf = (out.console.body.match(/name="csrf" value="([0-9a-f]{64})"/) || [])[1];
  out.csrf = csrf || "";
  window.result = JSON.stringify(out);
};
</script>`

// The DNS rebinding attack of issue 28 in a real browser. The coordinator
// is on the tailnet, where a person is known by the device their connection
// comes from; the admin's browser runs on the admin's device. A page the
// admin opens at cats.rebind.test rebinds that name to the coordinator's
// address and, from its own origin, calls CreateEnrollmentToken, reads the
// audit log and reads a console page's CSRF token. All of it is refused with
// 421 naming the host, and nothing is made: no enrollment token, no audit row
// of the call. Beside it a plain HTTP client (as curl -H 'Host: evil.example'
// would) gets the same 421; a form posted to the console from another
// origin with a good CSRF token is refused 403 naming the origin, and the
// task it would have cancelled stays queued. The admin's own console, at the
// coordinator's own name, works throughout.
func TestRebindingPageCannotDriveTheCoordinator(t *testing.T) {
	t.Parallel()
	tn := tailnettest.New(t)
	ca := tailnettest.NewCA(t)
	db := pgtest.NewDatabase(t)
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Transport: server.TransportTailnet,
		Tailnet: server.TailnetConfig{StateDir: t.TempDir(), ControlURL: tn.ControlURL, Ephemeral: true,
			DefaultRole: "admin", GetCertificate: ca.GetCertificate},
	})
	laptop := tn.Join(t, "admin-laptop")
	admin := podiumv1connect.NewAdminServiceClient(laptop.HTTPClient(), r.URL())
	tasks := podiumv1connect.NewTaskServiceClient(laptop.HTTPClient(), r.URL())
	ctx := context.Background()
	// A task no node will take: it stays queued unless someone cancels it.
	sub, err := tasks.Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox",
		Command: []string{"true"}, Labels: []string{"nowhere"}}}))
	if err != nil {
		t.Fatal(err)
	}
	taskID := sub.Msg.Task.Id

	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// One request per connection: the next one resolves the name
		// again, which is when the rebinding takes.
		w.Header().Set("Connection", "close")
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, attackerPage)
	}))
	t.Cleanup(attacker.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	fwd := &rebindingForwarder{ln: ln, attacker: attacker.Listener.Addr().String(), dial: laptop.Dial, coord: r.Addr()}
	go fwd.serve()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	p := newPageAt(t, "http://cats.rebind.test:"+port)
	p.open("/")
	if got := p.text("h1"); got != "Cute cats" {
		p.fail("the attacker's page shows %q, want its own", got)
	}
	fwd.rebound.Store(true)
	_ = eval[bool](p, `(window.attack(), true)`)
	p.until("the attacker's calls to end", defaultWait, `window.result !== undefined`)
	var got struct {
		Token, Audit, Console struct {
			Status int
			Body   string
		}
		CSRF string
	}
	if err := json.Unmarshal([]byte(eval[string](p, `window.result`)), &got); err != nil {
		t.Fatal(err)
	}
	p.screenshot("rebound")
	for what, c := range map[string]struct {
		Status int
		Body   string
	}{"CreateEnrollmentToken": got.Token, "ListAudit": got.Audit, "the console's queue page": got.Console} {
		if c.Status != http.StatusMisdirectedRequest || !strings.Contains(c.Body, "cats.rebind.test") || !strings.Contains(c.Body, "--allowed-host") {
			t.Errorf("the rebound page's call of %s answered %d %s; want 421 naming the host cats.rebind.test and --allowed-host", what, c.Status, c.Body)
		}
	}
	if got.CSRF != "" {
		t.Errorf("the rebound page read a console form's CSRF token %s", got.CSRF)
	}

	// curl -H 'Host: evil.example', from the admin's device: the same.
	for _, c := range []struct{ path, ctype, body string }{
		{"/podium.v1.AdminService/CreateEnrollmentToken", "application/json", "{}"},
		{"/console/tasks/" + taskID + "/cancel", "application/x-www-form-urlencoded", "csrf=x"},
	} {
		req, err := http.NewRequest(http.MethodPost, r.URL()+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "evil.example"
		req.Header.Set("Content-Type", c.ctype)
		res, err := laptop.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "evil.example") || !strings.Contains(string(body), "--allowed-host") {
			t.Errorf("POST %s with Host evil.example: %d %s; want 421 naming the host", c.path, res.StatusCode, body)
		}
	}

	// The admin's own console, at the coordinator's own name (loopback
	// here, as the forwarder is their machine), works: the task page and
	// its cancel form with the CSRF token it carries.
	mine := newPageAt(t, "http://127.0.0.1:"+port)
	mine.open("/console/tasks/" + taskID)
	if n := mine.count(`form#cancel`); n != 1 {
		mine.fail("the admin's task page has %d cancel forms, want 1", n)
	}
	csrf := eval[string](mine, `document.querySelector('form#cancel input[name="csrf"]').value`)
	// A page of another origin on the same site (another port of the same
	// address, so the SameSite cookie goes with it), holding a good CSRF
	// token, posts the cancel form to the console: refused for its origin.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Win a prize</title>
<form id="f" method="post" action="http://127.0.0.1:%s/console/tasks/%s/cancel"><input type="hidden" name="csrf" value="%s"></form>
<script>document.getElementById("f").submit()</script>`, port, taskID, html.EscapeString(csrf))
	}))
	t.Cleanup(other.Close)
	mine.base = other.URL
	mine.open("/")
	mine.until("the console's answer to the cross-site form", defaultWait,
		`location.pathname.endsWith("/cancel") && document.body.textContent.includes("another site than this console")`)
	mine.screenshot("cross-site form refused")

	res, err := tasks.Get(ctx, connect.NewRequest(&podiumv1.GetRequest{Id: taskID}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Task.State != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("the task is %v after the refused calls, want it still queued", res.Msg.Task.State)
	}
	audit, err := admin.ListAudit(ctx, connect.NewRequest(&podiumv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range audit.Msg.Entries {
		if e.Action == "AdminService.CreateEnrollmentToken" || e.Action == "TaskService.Cancel" {
			t.Errorf("the audit log records %s by %s (%s): nothing was to be done", e.Action, e.Who, e.Result)
		}
	}
	if n := countRows(t, db, "podium.enrollment_tokens"); n != 0 {
		t.Errorf("%d enrollment tokens after the attack, want 0", n)
	}
}

// countRows counts a table's rows in a test's database.
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
