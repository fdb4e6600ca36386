// Package console is the coordinator's web console: server-rendered pages
// under /console/ for the tasks, a task's live log, the nodes and the queue,
// for people with a browser and a link rather than the CLI.
//
// Every page is HTML rendered here with html/template; a little plain
// JavaScript (static/console.js, embedded like the stylesheet) follows a
// running task's log over server-sent events, refreshes the task list and
// loads earlier pages of a long log. Without JavaScript every page still
// reads, and a long log pages through ?from=.
//
// The console reads through the store and calls the task and admin services
// in-process, with the caller in the context as the API's interceptors put
// it there, so a page shows and allows exactly what the API would: the same
// role table (access.Check), the same ownership rule (access.Owns) and the
// same redaction of env values (the task service's view). It identifies
// callers itself, because the server's token gate guards only the API: on the
// tailnet by WhoIs, as the API does; on the local transport by a session
// that a personal API token (or the bootstrap token) opens at /console/login.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/admin"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/coordinator/webhooks"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultSessionTTL is how long a console session lasts after sign-in.
const DefaultSessionTTL = 12 * time.Hour

// Config configures the console.
type Config struct {
	// Transport is the server's transport (local, tailnet or host); it is
	// what the audit rows of the console's changes record.
	Transport string
	// Token is the bootstrap API token (local transport), which also signs
	// in as the coordinator's admin.
	Token string
	// Policy identifies callers on the tailnet transports; nil on the
	// local transport, where a session cookie does.
	Policy *tailnet.Policy
	// Resolver gives a tailnet person their role, as it does for the API.
	Resolver *access.Resolver
	// PublicURL is the URL people open the console at when a proxy stands
	// in front (server.Config.PublicURL). When it is https the cookies are
	// Secure even though the request reaching here is plain HTTP, and a
	// form posted from its origin counts as the console's own.
	PublicURL string
	// SessionTTL is how long a session lasts; DefaultSessionTTL when 0.
	SessionTTL time.Duration
	// MaxFollow bounds one live-log connection; the browser reconnects
	// where it left off. DefaultMaxFollow when 0.
	MaxFollow time.Duration
	// CLIDownloads says the replica serves the podium CLI at /download/:
	// the sign-in page and the header point people to it.
	CLIDownloads bool
	// Optional is the replica's list of optional parts as /readyz gives
	// it ("optional parts:" and a line per part, "  NAME: on" or
	// "  NAME: off (how to turn it on)"), which the system page shows.
	Optional string
}

// Deps are what the console works with.
type Deps struct {
	Store *store.Store
	Tasks *tasks.Service
	Admin *admin.Service
	// Schedules and Webhooks list what their pages show, with the API's
	// own rules (a member's own schedules; webhooks to admins only).
	Schedules *cron.Service
	Webhooks  *webhooks.Service
	Artifacts *artifacts.Service
	// Archive reads archived logs; nil reads them with Store and Artifacts.
	Archive *logarchive.Reader
	// Bus brings the task-event doorbells a live log waits on.
	Bus *bus.Bus
	Log *slog.Logger
}

// Console serves /console/.
type Console struct {
	cfg       Config
	store     *store.Store
	tasks     *tasks.Service
	admin     *admin.Service
	schedules *cron.Service
	webhooks  *webhooks.Service
	artifacts *artifacts.Service
	archive   *logarchive.Reader
	bus       *bus.Bus
	log       *slog.Logger
	mux       *http.ServeMux
	pages     map[string]*template.Template
	tokenHash [32]byte
	// done ends the live-log connections when the server shuts down, so
	// they do not hold its shutdown for its whole grace period.
	done     chan struct{}
	doneOnce sync.Once
}

// New returns the console.
func New(cfg Config, deps Deps) *Console {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxFollow <= 0 {
		cfg.MaxFollow = DefaultMaxFollow
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Archive == nil {
		deps.Archive = logarchive.NewReader(deps.Store, deps.Artifacts)
	}
	c := &Console{cfg: cfg, store: deps.Store, tasks: deps.Tasks, admin: deps.Admin, schedules: deps.Schedules, webhooks: deps.Webhooks,
		artifacts: deps.Artifacts,
		archive:   deps.Archive, bus: deps.Bus, log: deps.Log.With("part", "console"), pages: parsePages(),
		tokenHash: sha256.Sum256([]byte(cfg.Token)), done: make(chan struct{})}
	c.routes()
	return c
}

// Shutdown ends the live-log connections (http.Server.RegisterOnShutdown).
func (c *Console) Shutdown() { c.doneOnce.Do(func() { close(c.done) }) }

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.authed(c.logout))
	m.HandleFunc("GET /console/{$}", c.authed(c.tasksPage))
	m.HandleFunc("GET /console/tasks/{id}", c.authed(c.taskPage))
	m.HandleFunc("GET /console/tasks/{id}/log", c.authed(c.logFragment))
	m.HandleFunc("GET /console/tasks/{id}/log.raw", c.authed(c.rawLog))
	m.HandleFunc("GET /console/tasks/{id}/events", c.authed(c.events))
	m.HandleFunc("GET /console/tasks/{id}/artifacts/{name...}", c.authed(c.download))
	m.HandleFunc("POST /console/tasks/{id}/cancel", c.authed(c.cancel))
	m.HandleFunc("POST /console/tasks/{id}/rerun", c.authed(c.rerun))
	m.HandleFunc("POST /console/tasks/{id}/message", c.authed(c.message))
	m.HandleFunc("GET /console/nodes", c.authed(c.nodesPage))
	m.HandleFunc("GET /console/nodes/{id}", c.authed(c.nodePage))
	m.HandleFunc("POST /console/nodes/{id}/drain", c.authed(c.drain(true)))
	m.HandleFunc("POST /console/nodes/{id}/undrain", c.authed(c.drain(false)))
	m.HandleFunc("POST /console/nodes/{id}/labels", c.authed(c.labels))
	m.HandleFunc("GET /console/queue", c.authed(c.queuePage))
	m.HandleFunc("GET /console/system", c.authed(c.systemPage))
	m.HandleFunc("GET /console/schedules", c.authed(c.schedulesPage))
	m.HandleFunc("GET /console/secrets", c.authed(c.secretsPage))
	m.HandleFunc("GET /console/webhooks", c.authed(c.webhooksPage))
	m.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "There is no page at "+r.URL.Path+": start from the task list.")
	})
	c.mux = m
}

// cacheStatic lets browsers keep the stylesheet and script for an hour.
func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// csp allows only the console's own script and stylesheet: no inline script
// or style, no other origin, no framing, forms posting only here. Task output
// is escaped anyway; this is what stops it if an escape is ever missed.
// Colours given as 24-bit RGB, which terminal-to-html writes as inline
// styles, are dropped by it; the 16 and 256 colours are classes and show.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP serves every /console/ path with the security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.Method == http.MethodPost {
		// Forms are small: the largest field is a message to a task.
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	c.mux.ServeHTTP(w, r)
}

// maxFormBytes bounds a form's body: a message (tasks.MaxMessageBytes) and
// its encoding, with room for the other fields.
const maxFormBytes = 3*tasks.MaxMessageBytes + 4096

// viewer is who is looking at a page.
type viewer struct {
	Caller tailnet.Caller
	// Name is how the header names them: a login, a user's name, or
	// "bootstrap token".
	Name string
	Role string
	// CSRF is the token every form of theirs carries.
	CSRF string
	// Session is the hash of their session id (local transport).
	Session []byte
}

// IsAdmin reports whether the viewer is an admin (for the templates).
func (v *viewer) IsAdmin() bool { return access.Role(v.Role) == access.Admin }

// MaySubmit reports whether the viewer may submit tasks, and so has
// schedules and secrets of their own to look at (for the templates).
func (v *viewer) MaySubmit() bool { return access.Role(v.Role).Covers(access.Member) }

type viewerKey struct{}

func viewerFrom(ctx context.Context) *viewer {
	v, _ := ctx.Value(viewerKey{}).(*viewer)
	return v
}

// authed identifies the caller before h: on a POST it also checks the form's
// CSRF token (403 without a good one). A visitor the local transport does
// not know goes to the login page.
func (c *Console) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, status, err := c.identify(w, r)
		if err != nil {
			if status == http.StatusSeeOther {
				http.Redirect(w, r, "/console/login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, status, err.Error())
			return
		}
		if r.Method == http.MethodPost {
			if err := c.sameOrigin(r); err != nil {
				c.log.Warn("console: refused a form sent from another site", "path", r.URL.Path, "who", v.Name,
					"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
				c.fail(w, r, v, http.StatusForbidden, err.Error())
				return
			}
			if err := r.ParseForm(); err != nil {
				c.fail(w, r, v, http.StatusRequestEntityTooLarge, "The form could not be read ("+err.Error()+"); send less.")
				return
			}
			if !csrfOK(v.CSRF, r.PostForm.Get("csrf")) {
				c.fail(w, r, v, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and send the form again.")
				return
			}
		}
		ctx := tailnet.WithCaller(r.Context(), v.Caller)
		ctx = context.WithValue(ctx, tasks.CallerKey{}, v.Caller.Name())
		ctx = context.WithValue(ctx, viewerKey{}, v)
		h(w, r.WithContext(ctx))
	}
}

// need refuses (with a 403 page) a viewer whose role does not cover
// procedure, in the words the API would use.
func (c *Console) need(w http.ResponseWriter, r *http.Request, procedure string) bool {
	v := viewerFrom(r.Context())
	if err := access.Check(v.Caller, procedure); err != nil {
		c.fail(w, r, v, http.StatusForbidden, connectMessage(err))
		return false
	}
	return true
}

// may reports whether the viewer's role covers procedure, for what a page
// offers.
func may(ctx context.Context, procedure string) bool {
	v := viewerFrom(ctx)
	return v != nil && access.Check(v.Caller, procedure) == nil
}

// connectMessage is an error's message without Connect's code prefix.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// httpStatus is the HTTP status for a service's error.
func httpStatus(err error) int {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeDataLoss:
		return http.StatusInternalServerError
	}
	return http.StatusServiceUnavailable
}

// serviceFail shows a service's error as a page with its status.
func (c *Console) serviceFail(w http.ResponseWriter, r *http.Request, err error) {
	status := httpStatus(err)
	if status >= 500 {
		c.log.Warn("console request failed", "path", r.URL.Path, "err", err)
	}
	c.fail(w, r, viewerFrom(r.Context()), status, connectMessage(err))
}

// audited runs fn, a change made from the console, with its audit row as
// the API's auditor makes one: written with the change, or after it with the
// error's code when the change was refused or failed.
func (c *Console) audited(ctx context.Context, procedure, target string, fn func(context.Context) error) error {
	a := &store.Audit{Action: access.Action(procedure), Transport: c.cfg.Transport, Target: target}
	if v := viewerFrom(ctx); v != nil {
		a.Who, a.Role = v.Caller.Name(), v.Role
	}
	err := fn(store.WithAudit(ctx, a))
	if a.Written() {
		return err
	}
	result := "ok"
	if err != nil {
		result = connect.CodeOf(err).String()
	}
	if werr := c.store.WriteAudit(context.WithoutCancel(ctx), a, result); werr != nil {
		c.log.Error("audit row not written", "action", a.Action, "who", a.Who, "target", a.Target, "result", result, "err", werr)
	}
	return err
}

// errorPage is what fail renders.
type errorPage struct {
	Status  int
	Title   string
	Message string
}

// fail renders an error page with status; v may be nil (before sign-in).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *viewer, status int, msg string) {
	c.render(w, r, v, status, "error", http.StatusText(status), errorPage{Status: status, Title: http.StatusText(status), Message: msg})
}

// DefaultMaxFollow bounds one live-log connection (Config.MaxFollow).
const DefaultMaxFollow = 10 * time.Minute

// ago says how long ago d was, roughly, as a person would.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
