// Package browser holds the web console's tests in a real browser:
// Debian's Chromium, headless, driven by chromedp, against a real coordinator
// replica, a real Postgres, a real agent running tasks in Docker and a real S3
// server, asserting what a person sees in the page. scripts/ensure-browser.sh
// installs Chromium; without it the tests fail, they do not skip.
package browser
