package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
)

const (
	// sessionCookie carries the session id on the local transport.
	sessionCookie = "podium_console"
	// csrfCookie carries the CSRF token of the login form, and on the
	// tailnet (where there is no session row) of every form: the form's
	// token must match it (a double-submit cookie, which another site can
	// neither read nor set).
	csrfCookie = "podium_console_csrf"
	// maxTokenBytes bounds what is hashed and looked up, as the API's gate
	// does.
	maxTokenBytes = 512
)

// bootstrapName is how the header names the bootstrap token's holder.
const bootstrapName = "bootstrap token"

// identify decides who is asking. On the local transport a request without
// a live session gets status 303 (to the login page); on the tailnet a
// device that is not a person with a role gets 401 or 403 with the reason.
func (c *Console) identify(w http.ResponseWriter, r *http.Request) (*viewer, int, error) {
	if c.cfg.Policy != nil {
		return c.identifyTailnet(w, r)
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 128 {
		return nil, http.StatusSeeOther, errors.New("not signed in")
	}
	idHash := sha256.Sum256([]byte(ck.Value))
	s, err := c.store.ConsoleSessionByHash(r.Context(), idHash[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, http.StatusSeeOther, errors.New("not signed in")
	case err != nil:
		return nil, http.StatusServiceUnavailable, fmt.Errorf("cannot read the session from Postgres (%v); reload in a moment", err)
	}
	v := &viewer{CSRF: hex.EncodeToString(s.CSRF), Session: s.IDHash}
	// The token that opened the session is checked again, so a user
	// removed, or a bootstrap token replaced, signs out its sessions.
	switch s.Kind {
	case "token":
		if subtle.ConstantTimeCompare(s.TokenHash, c.tokenHash[:]) != 1 {
			return nil, http.StatusSeeOther, errors.New("the bootstrap token changed")
		}
		v.Caller = tailnet.Caller{Kind: tailnet.KindToken, Role: string(access.Admin), RoleFrom: "bootstrap token"}
		v.Name = bootstrapName
	default:
		u, err := c.store.UserByTokenHash(r.Context(), s.TokenHash)
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && u.Name != s.Name):
			return nil, http.StatusSeeOther, errors.New("the user's token is no longer valid")
		case err != nil:
			return nil, http.StatusServiceUnavailable, fmt.Errorf("cannot check the session's user in Postgres (%v); reload in a moment", err)
		}
		v.Caller = tailnet.Caller{Kind: tailnet.KindUser, Login: u.Name, Role: u.Role, RoleFrom: "user"}
		v.Name = u.Name
	}
	v.Role = v.Caller.Role
	return v, http.StatusOK, nil
}

// identifyTailnet asks Tailscale who is calling, as the API's guard does,
// and gives a person their role as the API's resolver does. Nodes are
// refused: they are not people.
func (c *Console) identifyTailnet(w http.ResponseWriter, r *http.Request) (*viewer, int, error) {
	caller, err := c.cfg.Policy.Identify(r.Context(), r.RemoteAddr)
	if err != nil {
		return nil, httpStatus(err), errors.New(connectMessage(err))
	}
	if caller.Kind != tailnet.KindPerson {
		return nil, http.StatusForbidden, fmt.Errorf("device %s is a Podium node: open the console from a person's untagged device", caller.Device)
	}
	if c.cfg.Resolver != nil {
		if caller, err = c.cfg.Resolver.Resolve(r.Context(), caller); err != nil {
			return nil, httpStatus(err), errors.New(connectMessage(err))
		}
	}
	return &viewer{Caller: caller, Name: caller.Name(), Role: caller.Role, CSRF: c.csrfCookie(w, r)}, http.StatusOK, nil
}

// csrfCookie returns the browser's CSRF cookie's token, setting a new one
// when it has none.
func (c *Console) csrfCookie(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 64 {
		if _, err := hex.DecodeString(ck.Value); err == nil {
			return ck.Value
		}
	}
	tok := hex.EncodeToString(random(32))
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/console", HttpOnly: true,
		Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	return tok
}

// secure reports whether the console's cookies are Secure: when the request
// came over TLS, and when people reach the console at an https public URL,
// through a proxy that ends TLS and speaks plain HTTP to the coordinator.
// Without it a cookie set behind such a proxy would also be sent over plain
// HTTP to the same name, where anyone on the path reads it.
func (c *Console) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(c.cfg.PublicURL), "https://")
}

// sameOrigin refuses a form posted from another site: its Origin must be
// the console's own (the request's Host, or the public URL's host), or, for
// a browser that sends no Origin, Sec-Fetch-Site must say same-origin or
// none (typed or bookmarked). A client that sends neither header is no
// browser, which no other site can drive; the form's CSRF token still
// guards it. The CSRF token alone would do while it stays secret; this
// holds when it does not (read by a page that rebound its name to the
// console's address, say) and for browsers that do not keep SameSite.
func (c *Console) sameOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin != "" && origin != "null" {
		u, err := url.Parse(origin)
		if err == nil && u.Host != "" && (strings.EqualFold(u.Host, r.Host) || c.publicOrigin(u)) {
			return nil
		}
		return fmt.Errorf("this form was sent from %.200s, another site than this console (%.200s): the console takes forms only from its own pages. "+
			"Open the console at its own address and send the form from there", origin, r.Host)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin", "none":
		return nil
	case "":
		if origin == "" {
			return nil
		}
		return errors.New("this form was sent from a page with no origin (Origin: null): the console takes forms only from its own pages; open the console at its own address and send the form from there")
	default:
		return fmt.Errorf("this form was sent from another site (Sec-Fetch-Site: %.40s): the console takes forms only from its own pages. "+
			"Open the console at its own address and send the form from there", site)
	}
}

// publicOrigin reports whether u is the public URL's origin.
func (c *Console) publicOrigin(u *url.URL) bool {
	if c.cfg.PublicURL == "" {
		return false
	}
	p, err := url.Parse(c.cfg.PublicURL)
	return err == nil && strings.EqualFold(p.Scheme, u.Scheme) && strings.EqualFold(p.Host, u.Host)
}

// csrfOK compares a form's token with the expected one in constant time.
func csrfOK(want, got string) bool {
	return want != "" && len(got) == len(want) && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

type loginPage struct {
	CSRF  string
	Error string
	// CLI says the replica serves the podium CLI at /download/, and Base
	// is the coordinator's URL for the commands that fetch it.
	CLI  bool
	Base string
}

// baseURL is the coordinator's URL as people reach it: --public-url when a
// proxy stands in front, else the request's scheme and Host (which the host
// guard has already held to the coordinator's own names).
func (c *Console) baseURL(r *http.Request) string {
	if c.cfg.PublicURL != "" {
		return strings.TrimRight(c.cfg.PublicURL, "/")
	}
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// loginPage shows the sign-in form; on the tailnet there is none (WhoIs
// says who is calling), so it goes to the task list.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Policy != nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.render(w, r, nil, http.StatusOK, "login", "Sign in", loginPage{CSRF: c.csrfCookie(w, r), CLI: c.cfg.CLIDownloads, Base: c.baseURL(r)})
}

// login checks the token as the API's gate does (the bootstrap token, or a
// personal token looked up by its SHA-256) and opens a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Policy != nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	if err := c.sameOrigin(r); err != nil {
		c.log.Warn("console: refused a sign-in sent from another site", "origin", r.Header.Get("Origin"),
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		c.fail(w, r, nil, http.StatusForbidden, err.Error())
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, http.StatusRequestEntityTooLarge, "The form could not be read ("+err.Error()+").")
		return
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || !csrfOK(ck.Value, r.PostForm.Get("csrf")) {
		c.fail(w, r, nil, http.StatusForbidden, "The form's CSRF token is missing or wrong (are cookies allowed?): reload the sign-in page and try again.")
		return
	}
	token := r.PostForm.Get("token")
	s := store.ConsoleSession{RoleFrom: "user", Kind: "user"}
	th := sha256.Sum256([]byte(token))
	switch {
	case subtle.ConstantTimeCompare([]byte(token), []byte(c.cfg.Token)) == 1 && c.cfg.Token != "":
		s.Kind, s.RoleFrom = "token", "bootstrap token"
	case token != "" && len(token) <= maxTokenBytes:
		u, err := c.store.UserByTokenHash(r.Context(), th[:])
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			c.fail(w, r, nil, http.StatusServiceUnavailable, "Cannot check the token in Postgres ("+err.Error()+"); try again in a moment.")
			return
		}
		s.Name = u.Name
	}
	if s.Kind == "user" && s.Name == "" {
		c.log.Info("console sign-in refused", "remote", r.RemoteAddr)
		c.render(w, r, nil, http.StatusUnauthorized, "login", "Sign in", loginPage{CSRF: c.csrfCookie(w, r), CLI: c.cfg.CLIDownloads, Base: c.baseURL(r),
			Error: "token not recognised: give your personal API token (an admin makes one with `podium user add NAME --role member`) or the coordinator's bootstrap token"})
		return
	}
	id := base64.RawURLEncoding.EncodeToString(random(32))
	idHash := sha256.Sum256([]byte(id))
	s.IDHash, s.TokenHash, s.CSRF = idHash[:], th[:], random(32)
	s.ExpiresAt = time.Now().Add(c.cfg.SessionTTL)
	if err := c.store.CreateConsoleSession(r.Context(), s); err != nil {
		c.fail(w, r, nil, http.StatusServiceUnavailable, "Cannot store the session in Postgres ("+err.Error()+"); try again in a moment.")
		return
	}
	who := s.Name
	if who == "" {
		who = bootstrapName
	}
	c.log.Info("console sign-in", "who", who, "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/console", HttpOnly: true,
		Secure: c.secure(r), SameSite: http.SameSiteStrictMode, MaxAge: int(c.cfg.SessionTTL.Seconds())})
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// logout ends the session and clears its cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	v := viewerFrom(r.Context())
	if v.Session != nil {
		if err := c.store.DeleteConsoleSession(r.Context(), v.Session); err != nil {
			c.fail(w, r, v, http.StatusServiceUnavailable, "Cannot end the session in Postgres ("+err.Error()+"); try again.")
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/console", HttpOnly: true,
		Secure: c.secure(r), SameSite: http.SameSiteStrictMode, MaxAge: -1})
	if c.cfg.Policy != nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}
