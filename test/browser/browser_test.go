package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The browser is one headless Chromium process for the whole test binary,
// started by the first test that needs it; each test's page is a browser
// context of its own (like a private window: its own cookies), so tests that
// log in as different people run side by side.
var browser struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab, the parent of every page
	cancel []context.CancelFunc
	err    error
}

// startBrowser starts Chromium once. Chromium runs headless, without its
// sandbox (the tests run as root, where the sandbox refuses to start) and
// without a GPU.
func startBrowser() {
	path, err := exec.LookPath("chromium")
	if err != nil {
		browser.err = fmt.Errorf("no chromium on PATH (%v): run scripts/ensure-browser.sh", err)
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		// A name of an attacker's that resolves to this machine, as DNS
		// rebinding makes one resolve to the coordinator's address
		// (rebinding_test.go); no other test's name is touched.
		chromedp.Flag("host-resolver-rules", "MAP *.rebind.test 127.0.0.1"))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	browser.ctx, browser.cancel = ctx, []context.CancelFunc{cancelCtx, cancelAlloc}
	// The first Do starts the browser, bound to ctx (no deadline here: a
	// deadline would end the browser with it). A Chromium that cannot start
	// fails at once with what it printed.
	if err := chromedp.Do(ctx); err != nil {
		browser.err = fmt.Errorf("start %s: %w (run scripts/ensure-browser.sh)", path, err)
	}
}

// closeBrowser ends the browser process, if a test started one.
func closeBrowser() {
	for _, cancel := range browser.cancel {
		cancel()
	}
}

// screenshotDir is where each test's screenshots go: $PODIUM_SCREENSHOTS,
// kept for a person to look at, else a temporary directory of the test.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PODIUM_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("PODIUM_SCREENSHOTS: %v", err)
	}
	return dir
}

// page is one browser tab in a browser context of its own, on one stack's
// console.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string // screenshots
	shot int    // screenshots taken, numbering the files
	// console holds what the page wrote to its console (and the CSP
	// violations Chromium reports there), printed when the test fails.
	console *syncBuffer
}

// defaultWait bounds how long one step in the page may take: generous, it
// bounds a hang and measures nothing.
const defaultWait = 30 * time.Second

func newPage(t *testing.T, s *stack) *page {
	t.Helper()
	return newPageAt(t, s.r.URL())
}

// newPageAt is a tab whose open loads paths under base.
func newPageAt(t *testing.T, base string) *page {
	t.Helper()
	browser.once.Do(startBrowser)
	if browser.err != nil {
		t.Fatalf("browsertest: %v", browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithNewBrowserContext())
	p := &page{t: t, ctx: ctx, base: base, dir: screenshotDir(t), console: &syncBuffer{}}
	// The first Do opens the tab and binds its life to the context it is
	// given: ctx itself, since a deadline here would close the tab as
	// soon as this returned.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			fmt.Fprintf(p.console, "%s:%d %s\n", m.URL, m.Line+1, m)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("the page's console:\n%s", p.console.String())
		}
	})
	return p
}

// fail takes a screenshot of what the page shows, then fails the test.
func (p *page) fail(format string, args ...any) {
	p.t.Helper()
	p.screenshot("failed")
	p.t.Fatalf(format, args...)
}

// do runs actions in the page; after d it fails the test with what it was
// doing or waiting for.
func (p *page) do(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fail("gave up after %s waiting for %s: %v", d, what, err)
	}
}

// open loads a console page (path under the replica, /console/…) and
// waits for its document to be ready.
func (p *page) open(path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, defaultWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(p.base+path), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		// Say whether the server answers at all, to tell a hung page
		// from a hung server.
		res, herr := http.Get(p.base + path)
		answer := fmt.Sprint(herr)
		if herr == nil {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 2000))
			_ = res.Body.Close()
			answer = fmt.Sprintf("%s %v\n%s", res.Status, res.Header, body)
		}
		p.fail("gave up after %s waiting for the page %s to load: %v; a plain GET of it answers: %s", defaultWait, path, err, answer)
	}
}

// until polls a JavaScript expression in the page until it is true; after d
// it fails the test with what it was waiting for. It evaluates through the
// DevTools protocol, which the console's Content-Security-Policy (no eval)
// does not stop, and it goes on across a navigation, unlike chromedp.Poll.
func (p *page) until(what string, d time.Duration, expr string) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			// A page being replaced by the next one has no context
			// to evaluate in for a moment: try again.
			last = err
		}
		if time.Now().After(deadline) {
			p.fail("gave up after %s waiting for %s (last error: %v)", d, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eval is the value of a JavaScript expression in the page.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, defaultWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the trimmed text of the first element matching a CSS selector, ""
// when there is none.
func (p *page) text(css string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? "").trim()`, js(css)))
}

// count is how many elements match a CSS selector.
func (p *page) count(css string) int {
	p.t.Helper()
	return eval[int](p, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(css)))
}

var fileSafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// screenshot writes the whole page as a PNG to the test's screenshot
// directory and returns the file's path.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, defaultWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p.shot++
	file := filepath.Join(p.dir, fileSafe.ReplaceAllString(fmt.Sprintf("%s-%d-%s.png", p.t.Name(), p.shot, name), "_"))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p.t.Logf("screenshot: %s", file)
	return file
}

// login signs in through the console's login form with a personal API
// token, as a person would: the form, the token typed in, the button.
func (p *page) login(token string) {
	p.t.Helper()
	p.open("/console/login")
	p.do("the login form", defaultWait,
		chromedp.WaitVisible(chromedp.CSS(`form#login input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`form#login input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`form#login button[type="submit"]`)),
	)
	p.until("the tasks page after logging in", defaultWait,
		`location.pathname === "/console/" && document.querySelector("#whoami") !== null`)
}

// js is s as a JavaScript string literal.
func js(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// lineSel is the selector of a log line's element: L<n>.
func lineSel(n int) string { return fmt.Sprintf("#L%d", n) }
