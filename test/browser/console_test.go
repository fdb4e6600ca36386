package browser

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// taskWait bounds a short task's run, from submit to its end.
const taskWait = 60 * time.Second

// A person logs in with their personal API token through the form: before
// that every page sends them to it, a wrong token is refused with what went
// wrong, and afterwards the header names them and their role. The session
// cookie is out of the page's scripts' reach (HttpOnly) and stays on the
// console's own pages (SameSite=Strict, Path=/console).
func TestLoginWithAPersonalTokenShowsNameAndRole(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	p := newPage(t, s)

	p.open("/console/")
	p.until("the redirect to the login page", defaultWait, `location.pathname === "/console/login"`)
	if n := p.count(`form#login input[name="csrf"]`); n != 1 {
		p.fail("the login form has %d csrf inputs, want 1", n)
	}
	if n := p.count(`label[for]`); n == 0 {
		p.fail("the login form's token input has no label")
	}
	p.screenshot("login")

	p.do("the refusal of a wrong token", defaultWait,
		chromedp.SendKeys(chromedp.CSS(`form#login input[name="token"]`), "not-a-token-anyone-was-given-0123456789"),
		chromedp.Click(chromedp.CSS(`form#login button[type="submit"]`)),
	)
	p.until("the error saying the token was not recognised", defaultWait,
		`(document.querySelector("p.error")?.textContent ?? "").includes("token not recognised")`)
	p.screenshot("refused")

	p.login(token)
	if got := p.text("#whoami"); !strings.Contains(got, "alice") {
		p.fail("#whoami shows %q, want alice", got)
	}
	if got := p.text("#role"); got != "admin" {
		p.fail("#role shows %q, want admin", got)
	}
	if c := eval[string](p, `document.cookie`); strings.Contains(c, "podium_console") {
		p.fail("the page's scripts can read the session cookie (%q): it must be HttpOnly", c)
	}
	cookies := p.cookies()
	var session *network.Cookie
	for _, c := range cookies {
		if c.Name == "podium_console" {
			session = c
		}
	}
	if session == nil {
		p.fail("no podium_console cookie after logging in; cookies: %v", cookies)
	}
	if !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || session.Path != "/console" {
		p.fail("the session cookie is HttpOnly=%v SameSite=%q Path=%q, want HttpOnly, Strict, /console", session.HTTPOnly, session.SameSite, session.Path)
	}
	p.screenshot("tasks")

	// A member's header says member.
	member := newPage(t, s)
	member.login(s.addUser("bob", "member"))
	if who, role := member.text("#whoami"), member.text("#role"); !strings.Contains(who, "bob") || role != "member" {
		member.fail("bob's header shows %q / %q, want bob / member", who, role)
	}
	member.screenshot("member")
}

// cookies are the browser's cookies for the page's URL.
func (p *page) cookies() []*network.Cookie {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, defaultWait)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		p.fail("read the cookies: %v", err)
	}
	return res.Cookies
}

// lineWithText is a JavaScript expression true when some log line's text is
// exactly want (its whitespace trimmed).
func lineWithText(want string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#log .line .text")].some(e => e.textContent.trim() === %s)`, js(want))
}

// ticksShown is the highest "tick N" line the page shows, 0 for none.
func ticksShown(p *page) int {
	p.t.Helper()
	return eval[int](p, `Math.max(0, ...[...document.querySelectorAll("#log .line .text")].map(e => {
		const m = /^tick (\d+)$/.exec(e.textContent.trim()); return m ? Number(m[1]) : 0 }))`)
}

// A running task's log grows in the page as the task prints, with no
// reload: the page opened while the task runs shows the lines so far, then
// later ones arrive, and the state turns to succeeded when it ends.
func TestRunningTasksLogGrowsLive(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	const ticks = 60 // 12 s at one line every 0.2 s
	id := s.submit(token, "sh", "-c", fmt.Sprintf(`for i in $(seq 1 %d); do echo "tick $i"; sleep 0.2; done`, ticks))
	p := newPage(t, s)
	p.login(token)
	s.waitState(id, podiumv1.TaskState_TASK_STATE_RUNNING, taskWait)
	p.open("/console/tasks/" + id)
	p.until("the first line of the running task", defaultWait, lineWithText("tick 1"))
	if st := p.text("#task-state"); st != "running" {
		p.fail("#task-state shows %q, want running", st)
	}
	// A reload would lose this.
	eval[bool](p, `window.podiumNoReload = true`)
	k := ticksShown(p)
	if k >= ticks-10 {
		p.fail("the page showed tick %d of %d at once: the task ran too far ahead for the test to see the log grow", k, ticks)
	}
	p.screenshot("early")
	n := k + 10
	p.until(fmt.Sprintf("tick %d to appear after tick %d, without a reload", n, k), defaultWait, lineWithText(fmt.Sprintf("tick %d", n)))
	p.screenshot("grown")
	p.until("the state to turn to succeeded", taskWait, `(document.querySelector("#task-state")?.textContent ?? "").trim() === "succeeded"`)
	p.until("the last line", defaultWait, lineWithText(fmt.Sprintf("tick %d", ticks)))
	if !eval[bool](p, `window.podiumNoReload === true`) {
		p.fail("the page reloaded to show the new lines; they must be appended live")
	}
	// Every line once, in order.
	got := eval[[]string](p, `[...document.querySelectorAll("#log .line .text")].map(e => e.textContent.trim()).filter(t => t.startsWith("tick "))`)
	for i, line := range got {
		if line != fmt.Sprintf("tick %d", i+1) {
			p.fail("line %d of the page reads %q, want tick %d: the live tail lost or repeated lines\n%v", i+1, line, i+1, got)
		}
	}
	if len(got) != ticks {
		p.fail("the page shows %d tick lines, want %d", len(got), ticks)
	}
	p.screenshot("done")
}

// ANSI colours are rendered (by terminal-to-html), not shown as escape
// codes: the red word is in an element with the red foreground's class, in a
// colour other than the plain text's.
func TestANSIColoursAreRendered(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	id := s.submit(token, "sh", "-c", `printf '\033[31mred\033[0m plain\n'; printf '\033[1;32mbold green\033[0m\n'`)
	s.waitState(id, podiumv1.TaskState_TASK_STATE_SUCCEEDED, taskWait)
	p := newPage(t, s)
	p.login(token)
	p.open("/console/tasks/" + id)
	p.until("the red span", defaultWait, `document.querySelector('#log span[class*="fg31"]') !== null`)
	if got := p.text(`#log span[class*="fg31"]`); got != "red" {
		p.fail("the fg31 span holds %q, want red", got)
	}
	if got := p.text(`#log span[class*="fg32"]`); got != "bold green" {
		p.fail("the fg32 span holds %q, want bold green", got)
	}
	if log := p.text("#log"); strings.Contains(log, "[31m") || strings.Contains(log, "\x1b") {
		p.fail("the log shows raw escape codes: %q", log)
	}
	red := eval[string](p, `getComputedStyle(document.querySelector('#log span[class*="fg31"]')).color`)
	// " plain", after the red word, is drawn in the line's own colour.
	plain := eval[string](p, `getComputedStyle(document.querySelector('#log span[class*="fg31"]').closest(".text")).color`)
	if red == plain {
		p.fail("the red span is drawn in %s, the same colour as plain text: the console's CSS has no colour for its class", red)
	}
	p.screenshot("colours")
}

// Output that looks like HTML is shown as text, both when the page is
// rendered and when lines arrive live: the script is not in the DOM as an
// element and never runs, and neither does an event handler attribute.
func TestScriptInOutputStaysText(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	const (
		early = `<script>window.podiumInjected = 1</script>`
		late  = `<script>window.podiumInjectedLive = 1</script>`
		img   = `<img src=x onerror="window.podiumImg = 1">`
	)
	// The task prints the first script, waits for a message, then prints
	// the others: those arrive through the live tail.
	id := s.submit(token, "sh", "-c", fmt.Sprintf(`echo '%s'; echo ready; podium-runner ask >/dev/null; echo '%s'; echo '%s'`, early, late, img))
	p := newPage(t, s)
	p.login(token)
	s.waitState(id, podiumv1.TaskState_TASK_STATE_RUNNING, taskWait)
	p.open("/console/tasks/" + id)
	p.until("the first script's text in the log", defaultWait, lineWithText(early))
	if r := s.podiumCmd(coordtest.Token, "task", "send", id, "go"); r.Run() != nil {
		t.Fatalf("podium task send %s go failed", id)
	}
	p.until("the live script's text in the log", defaultWait, lineWithText(late))
	p.until("the img tag's text in the log", defaultWait, lineWithText(img))
	check := func(when string) {
		if n := p.count("#log script, #log img"); n != 0 {
			p.fail("%s: #log holds %d script or img elements: the task's output was not escaped", when, n)
		}
		for _, v := range []string{"podiumInjected", "podiumInjectedLive", "podiumImg"} {
			if got := eval[string](p, "typeof window."+v); got != "undefined" {
				p.fail("%s: window.%s is %s: the task's output ran as script", when, v, got)
			}
		}
	}
	check("live")
	p.screenshot("live")
	s.waitState(id, podiumv1.TaskState_TASK_STATE_SUCCEEDED, taskWait)
	p.open("/console/tasks/" + id)
	p.until("the img tag's text in the rendered log", defaultWait, lineWithText(img))
	check("rendered")
	p.screenshot("rendered")
}

// Cancel from the page ends the task: the owner (a member) sees the button
// on their running task, clicks it, the page shows the task cancelled, and
// `podium run` following the same task exits 130 as it does for
// `podium task cancel`.
func TestCancelFromThePageEndsTheTaskAndTheCLIExits130(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("carol", "member")
	f := s.follow(token, "run", "--image", s.image, "--", "sh", "-c", "echo ready; sleep 600")
	var id string
	wait.For(t, taskWait, "podium run to print the task id and the task's first line", func() bool {
		id = taskIDRe.FindString(f.stderr.String())
		return id != "" && strings.Contains(f.out.String(), "ready\n")
	})
	p := newPage(t, s)
	p.login(token)
	p.open("/console/tasks/" + id)
	p.do("the cancel button", defaultWait, chromedp.WaitVisible(chromedp.CSS("form#cancel button#cancel-button")))
	p.screenshot("running")
	p.do("clicking cancel", defaultWait, chromedp.Click(chromedp.CSS("form#cancel button#cancel-button")))
	p.until("the page to show the task cancelled", taskWait,
		fmt.Sprintf(`location.pathname === %s && (document.querySelector("#task-state")?.textContent ?? "").trim() === "cancelled"`, js("/console/tasks/"+id)))
	p.screenshot("cancelled")
	if code := f.exitCode(t, taskWait); code != 130 {
		t.Fatalf("podium run following the task exited %d, want 130\nstderr:\n%s", code, f.stderr.String())
	}
	if st := s.task(id).State; st != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("the API says the task is %v, want cancelled", st)
	}
	if n := p.count("button#cancel-button"); n != 0 {
		p.fail("the cancelled task's page still offers a cancel button")
	}
}

// A member sees the nodes but no drain or undrain button; an admin sees
// one on the node's row, in view in a 1280 px window even when the node has
// long labels, and it drains the node.
func TestMemberSeesNoDrainButtonAdminDoes(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	row := fmt.Sprintf(`table#nodes tr[data-node-id=%s]`, js(s.node))

	member := newPage(t, s)
	member.login(s.addUser("max", "member"))
	member.open("/console/nodes")
	member.do("the node's row", defaultWait, chromedp.WaitVisible(chromedp.CSS(row)))
	if got := member.text(row + " td.status"); got == "" {
		member.fail("the node's row has no status")
	}
	if n := member.count("button.drain, button.undrain"); n != 0 {
		member.fail("a member sees %d drain/undrain buttons on /console/nodes, want none", n)
	}
	member.screenshot("member")

	// Long labels, as fleets have them: the table still fits a 1280 px
	// window, Drain in view, and the page never scrolls sideways.
	var long []string
	for i := range 6 {
		long = append(long, fmt.Sprintf("team.example.com/cost-centre-%d=research-and-development-long-value-%d", i, i))
	}
	if _, err := s.r.Admin().SetNodeLabels(context.Background(), connect.NewRequest(&podiumv1.SetNodeLabelsRequest{NodeId: s.node, Add: long})); err != nil {
		t.Fatal(err)
	}
	admin := newPage(t, s)
	admin.login(s.addUser("ada", "admin"))
	admin.open("/console/nodes")
	admin.do("the node's drain button", defaultWait, chromedp.WaitVisible(chromedp.CSS(row+" button.drain")))
	w := eval[float64](admin, "document.documentElement.clientWidth")
	if w > 1280 {
		admin.fail("the page is %v px wide, want at most the 1280 px window for this check", w)
	}
	if right := eval[float64](admin, fmt.Sprintf(`document.querySelector(%s).getBoundingClientRect().right`, js(row+" button.drain"))); right > w {
		admin.fail("the drain button ends at %v px, past the %v px the window shows", right, w)
	}
	if sw := eval[float64](admin, "document.documentElement.scrollWidth"); sw > w {
		admin.fail("the nodes page is %v px wide in a %v px view: it scrolls sideways", sw, w)
	}
	admin.screenshot("admin")
	admin.do("clicking drain", defaultWait, chromedp.Click(chromedp.CSS(row+" button.drain")))
	wait.For(t, defaultWait, "the node to be draining", func() bool {
		res, err := s.r.Admin().ListNodes(context.Background(), connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		for _, n := range res.Msg.Nodes {
			if n.Id == s.node {
				return n.Draining
			}
		}
		return false
	})
	admin.until("the undrain button in place of drain", defaultWait,
		fmt.Sprintf(`document.querySelector(%s) !== null`, js(row+" button.undrain")))
	admin.screenshot("drained")
}

// bigLines is how many lines the big log has, each bigLineLen bytes with its
// newline: 20.2 MB in all.
const (
	bigLines   = 200_000
	bigLineLen = 101
)

// A 20 MB log opens: the page holds at most the last 1,000 lines, the last
// line can be scrolled to and seen, and "load earlier" brings the lines
// before the first one shown.
func TestTwentyMegabyteLogOpensAndScrolls(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	// "line 000001 " and 88 x's and a newline.
	id := s.submit(token, "awk", fmt.Sprintf(`BEGIN { x = sprintf("%%88s", ""); gsub(/ /, "x", x); for (i = 1; i <= %d; i++) printf "line %%06d %%s\n", i, x }`, bigLines))
	s.waitState(id, podiumv1.TaskState_TASK_STATE_SUCCEEDED, 5*time.Minute)
	if got := s.task(id).GetUsage().GetOutputBytes(); got != bigLines*bigLineLen {
		t.Fatalf("the task's stored output is %d bytes, want %d", got, bigLines*bigLineLen)
	}
	p := newPage(t, s)
	p.login(token)
	p.open("/console/tasks/" + id)
	last := fmt.Sprintf("line %06d ", bigLines)
	// The task's last line; notes (the task's end) may follow it.
	findLast := fmt.Sprintf(`[...document.querySelectorAll("#log .line")].find(e => e.textContent.includes(%s))`, js(last))
	p.until("the task's last line in the page", 2*time.Minute, findLast+` !== undefined`)
	lines := p.count("#log .line")
	if lines > 1000 {
		p.fail("the page rendered %d lines of a 20 MB log at once, want at most 1,000 (the rest paged from the server)", lines)
	}
	lastSel := "#" + eval[string](p, findLast+`.id`)
	p.do("scrolling to the last line", defaultWait,
		chromedp.ScrollIntoView(chromedp.CSS(lastSel)),
		chromedp.WaitVisible(chromedp.CSS(lastSel)))
	if !eval[bool](p, fmt.Sprintf(`(() => { const r = document.querySelector(%s).getBoundingClientRect();
		return r.bottom > 0 && r.top < window.innerHeight })()`, js(lastSel))) {
		p.fail("the last line is not in the viewport after scrolling to it")
	}
	p.screenshot("tail")
	first := firstLineNumber(p)
	if first <= 1 {
		p.fail("the page starts at line %d of a %d-line log", first, bigLines)
	}
	// The log numbers its notes too (scheduled, running, …), so the task's
	// own numbering is read from the line's text.
	var firstTask int
	firstText := p.text(lineSel(first) + " .text")
	if _, err := fmt.Sscanf(firstText, "line %d", &firstTask); err != nil || firstTask <= 1 {
		p.fail("the first line shown, L%d, reads %q: want one of the task's lines past its first", first, firstText)
	}
	if href := eval[string](p, `document.querySelector("a#raw")?.getAttribute("href") ?? ""`); !strings.HasSuffix(href, "/log.raw") {
		p.fail("a#raw links to %q, want the task's log.raw", href)
	}
	p.do("clicking load earlier", defaultWait,
		chromedp.ScrollIntoView(chromedp.CSS("a#log-earlier")),
		chromedp.Click(chromedp.CSS("a#log-earlier")))
	p.until(fmt.Sprintf("line %d, the one before the first shown, after load earlier", first-1), defaultWait,
		fmt.Sprintf(`document.getElementById("L%d") !== null`, first-1))
	p.do("scrolling to the earlier line", defaultWait, chromedp.ScrollIntoView(chromedp.CSS(lineSel(first-1))), chromedp.WaitVisible(chromedp.CSS(lineSel(first-1))))
	if got := p.text(lineSel(first - 1)); !strings.Contains(got, fmt.Sprintf("line %06d ", firstTask-1)) {
		p.fail("L%d reads %q, want the task's line %06d, the one before L%d's", first-1, got, firstTask-1, first)
	}
	p.screenshot("earlier")
}

var lineID = regexp.MustCompile(`^L(\d+)$`)

// firstLineNumber is the number of the first log line the page shows.
func firstLineNumber(p *page) int {
	p.t.Helper()
	id := eval[string](p, `document.querySelector("#log .line")?.id ?? ""`)
	m := lineID.FindStringSubmatch(id)
	if m == nil {
		p.fail("the first log line's id is %q, want L<n>", id)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// An artifact downloaded from the task page, by the browser, is byte for
// byte the file the task wrote: its SHA-256 matches what the task's own
// sha256sum printed, and what the page shows in its row.
func TestArtifactDownloadMatchesItsSHA256(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{s3: true})
	token := s.addUser("alice", "admin")
	id := s.submit(token, "sh", "-c", `set -e
A=/workspace/.podium/artifacts
mkdir -p $A
head -c 3000000 /dev/urandom > $A/data.bin
cd $A && sha256sum data.bin`)
	s.waitState(id, podiumv1.TaskState_TASK_STATE_SUCCEEDED, taskWait)
	logs := s.podiumCmd(token, "logs", id)
	out, err := logs.Output()
	if err != nil {
		t.Fatalf("podium logs %s: %v", id, err)
	}
	m := regexp.MustCompile(`(?m)^([0-9a-f]{64})  data\.bin$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the task printed no sha256sum of data.bin:\n%s", out)
	}
	want := string(m[1])

	p := newPage(t, s)
	p.login(token)
	p.open("/console/tasks/" + id)
	row := `table#artifacts tr[data-artifact="data.bin"]`
	p.do("the artifact's row", defaultWait, chromedp.WaitVisible(chromedp.CSS(row+" a.download")))
	if got := p.text(row + " td.sha256"); got != want {
		p.fail("the page shows SHA-256 %q for data.bin, the task's sha256sum says %s", got, want)
	}
	if got := p.text(row + " td.size"); got == "" {
		p.fail("the artifact's row shows no size")
	}
	p.screenshot("artifacts")

	dir := t.TempDir()
	// Subscribed before the click, on a context whose deadline ends the
	// wait for the download.
	dctx, cancel := context.WithTimeout(p.ctx, defaultWait)
	defer cancel()
	progress := chromedp.Events(dctx, cdpbrowser.DownloadProgress)
	p.do("the download to start", defaultWait,
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
				Behavior:         cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName,
				BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
				DownloadPath:     dir,
				EventsEnabled:    new(true),
			})
			return err
		}),
		chromedp.Click(chromedp.CSS(row+" a.download")),
	)
	var file string
	for ev, err := range progress {
		if err != nil {
			p.fail("gave up after %s waiting for the browser's download of data.bin to complete: %v", defaultWait, err)
		}
		if ev.State == cdpbrowser.DownloadProgressStateCanceled {
			p.fail("the browser cancelled the download of data.bin")
		}
		if ev.State == cdpbrowser.DownloadProgressStateCompleted {
			file = filepath.Join(dir, ev.GUID)
			break
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the downloaded file: %v", err)
	}
	sum := sha256.Sum256(got)
	if hex.EncodeToString(sum[:]) != want || len(got) != 3000000 {
		t.Fatalf("the browser downloaded %d bytes with SHA-256 %x; the task wrote 3000000 bytes with SHA-256 %s", len(got), sum, want)
	}
}

// TestFailedTaskPageShowsStateAndColouredLog opens the page of a task that
// failed after printing coloured build output to stdout and stderr: the page
// says failed with the task's exit code, and every coloured word is rendered
// in its colour. Its screenshot is the README's picture of a task page: with
// PODIUM_UPDATE_SCREENSHOT=1 the test also copies it to docs/console-task.png.
func TestFailedTaskPageShowsStateAndColouredLog(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	token := s.addUser("alice", "admin")
	id := s.submit(token, "sh", "-c", `printf '\033[1mbuilding\033[0m podium\n'
for p in store scheduler tasks console; do printf '\033[32mok\033[0m   github.com/podiumhq/podium/coordinator/%s\n' $p; done
printf '\033[33mwarning:\033[0m 1 test skipped\n' >&2
printf '\033[31mFAIL\033[0m github.com/podiumhq/podium/agent/executor\n'
exit 1`)
	s.waitState(id, podiumv1.TaskState_TASK_STATE_FAILED, taskWait)
	p := newPage(t, s)
	p.login(token)
	p.open("/console/tasks/" + id)
	p.until("the red FAIL", defaultWait, `[...document.querySelectorAll('#log span[class*="fg31"]')].some(e => e.textContent === 'FAIL')`)
	p.until("four green oks", defaultWait, `[...document.querySelectorAll('#log span[class*="fg32"]')].filter(e => e.textContent === 'ok').length === 4`)
	p.until("the yellow warning from stderr", defaultWait, `[...document.querySelectorAll('#log .stderr span[class*="fg33"]')].some(e => e.textContent === 'warning:')`)
	if got := p.text("#task-state"); !strings.Contains(got, "failed") {
		t.Fatalf("#task-state says %q, want failed", got)
	}
	if got := strings.TrimSpace(p.text("#exit-code")); got != "1" {
		t.Fatalf("#exit-code says %q, want 1", got)
	}
	file := p.screenshot("task-page")
	if os.Getenv("PODIUM_UPDATE_SCREENSHOT") != "1" || file == "" {
		return
	}
	png, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "console-task.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
