package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// postFrom posts a form with the headers a browser would send from a page
// (Origin, Sec-Fetch-Site), and cookies of its own when jar is nil.
func postFrom(t *testing.T, c *http.Client, u string, form url.Values, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// A form posted from another site is refused with 403 naming the site, even
// with a good CSRF token and the session's cookie (a token leaked, or a
// browser that does not keep SameSite), and changes nothing; the console's
// own origin, or a browser that says same-origin or none, goes through.
func TestFormsFromAnotherSiteRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox"}, true)
	alice := e.as("alice")
	_, body := get(t, alice, e.srv.URL, "/console/tasks/"+id)
	form := url.Values{"csrf": {csrfOf(t, body)}}
	cancelURL := e.srv.URL + "/console/tasks/" + id + "/cancel"
	for _, c := range []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"Origin": "http://evil.example"}, "sent from http://evil.example, another site than this console"},
		{map[string]string{"Origin": "http://" + strings.TrimPrefix(e.srv.URL, "http://") + ".evil.example"}, "another site than this console"},
		{map[string]string{"Origin": "null"}, "no origin"},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site: same-site"},
	} {
		res, body := postFrom(t, alice, cancelURL, form, c.headers)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, c.want) {
			t.Errorf("cancel with %v: %s, want 403 saying %q:\n%s", c.headers, res.Status, c.want, body)
		}
	}
	if tk, _ := e.st.GetTask(context.Background(), id); tk.CancelRequestedAt != nil {
		t.Fatal("a form from another site cancelled the task")
	}
	// Sign-in too: a login form posted from elsewhere (to sign the victim
	// in as the attacker) is refused.
	c := e.client()
	_, login := get(t, c, e.srv.URL, "/console/login")
	res, lbody := postFrom(t, c, e.srv.URL+"/console/login", url.Values{"token": {e.tokens["bob"]}, "csrf": {csrfOf(t, login)}},
		map[string]string{"Origin": "http://evil.example"})
	if res.StatusCode != http.StatusForbidden || !strings.Contains(lbody, "another site than this console") {
		t.Errorf("sign-in from another site: %s, want 403:\n%s", res.Status, lbody)
	}
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "same-origin"}, {"Origin": e.srv.URL}} {
		res, body := postFrom(t, alice, cancelURL, form, h)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("cancel from the console's own page (%v): %s\n%s", h, res.Status, body)
		}
	}
}

// Behind a proxy that ends TLS, the console sees plain HTTP; with an https
// public URL its cookies are Secure all the same, so the browser never
// sends them over plain HTTP. A form from the public origin is its own.
func TestCookiesSecureWhenThePublicURLIsHTTPS(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, false, "https://podium.example.com")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, body := get(t, c, e.srv.URL, "/console/login")
	var csrfCookie *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == "podium_console_csrf" {
			csrfCookie = ck
		}
	}
	if csrfCookie == nil || !csrfCookie.Secure {
		t.Fatalf("the sign-in page's CSRF cookie %+v behind an https public URL: want Secure", csrfCookie)
	}
	res, body = postFrom(t, c, e.srv.URL+"/console/login", url.Values{"token": {e.tokens["ada"]}, "csrf": {csrfOf(t, body)}},
		map[string]string{"Origin": "https://podium.example.com", "Cookie": csrfCookie.Name + "=" + csrfCookie.Value})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in behind the proxy: %s\n%s", res.Status, body)
	}
	for _, ck := range res.Cookies() {
		if ck.Name == "podium_console" {
			if !ck.Secure || !ck.HttpOnly {
				t.Fatalf("session cookie behind an https public URL %+v: want Secure and HttpOnly", ck)
			}
			return
		}
	}
	t.Fatalf("no session cookie: %s", res.Status)
}

// A task's notify URL (a chat webhook's URL is the credential to post there)
// is on its page for its owner and admins only; others see that it is
// hidden.
func TestNotifyURLsHiddenForNonOwners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	id := e.task("alice", &podiumv1.TaskSpec{Image: "busybox",
		Notify: []*podiumv1.Notify{{Url: "https://hooks.chat.example/services/T1/B2/webhook-credential-xyz"}}}, false)
	for who, shown := range map[string]bool{"alice": true, "ada": true, "bob": false, "vera": false} {
		_, body := get(t, e.as(who), e.srv.URL, "/console/tasks/"+id)
		if got := strings.Contains(body, "webhook-credential"); got != shown {
			t.Errorf("%s sees the notify URL: %t, want %t", who, got, shown)
		}
		if !shown && !strings.Contains(body, "hidden: only the task") {
			t.Errorf("%s: the page does not say the notify URL is hidden:\n%s", who, body)
		}
	}
}
