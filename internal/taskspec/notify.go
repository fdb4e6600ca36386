package taskspec

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Bounds of spec.notify. Each entry is an outbox row and a POST for every
// task that ends, so a task has few; a URL longer than 2048 bytes is not
// one a browser or proxy would carry either.
const (
	MaxNotify         = 4
	MaxNotifyURLBytes = 2048
)

// Event types of webhooks and notify: entries (see docs/webhooks.md).
const (
	EventTaskFinished = "task.finished"
	EventTaskLost     = "task.lost"
	EventNodeOffline  = "node.offline"
)

// TaskEvents are the events a task's own notify: entry may ask for; the
// default is both.
var TaskEvents = []string{EventTaskFinished, EventTaskLost}

// CheckWebhookURL says what is wrong with a webhook's URL, or "": it must
// be an absolute http or https URL with a host, no user:password@ (the
// outbox and `podium webhook ls` would show it) and no #fragment, at most
// MaxNotifyURLBytes.
func CheckWebhookURL(u string) string {
	if u == "" {
		return "empty: give an http:// or https:// URL, e.g. https://hooks.example.com/podium"
	}
	if len(u) > MaxNotifyURLBytes {
		return fmt.Sprintf("is %d bytes, longer than %d", len(u), MaxNotifyURLBytes)
	}
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Sprintf("%s is not a URL: %v", clip(u), err)
	}
	switch {
	case p.Scheme != "http" && p.Scheme != "https":
		return fmt.Sprintf("%s: the scheme must be http or https", clip(u))
	case p.Host == "" || p.Hostname() == "":
		return fmt.Sprintf("%s has no host: give an absolute URL such as https://hooks.example.com/podium", clip(u))
	case p.User != nil:
		return fmt.Sprintf("%s carries a user name or password: sign with a secret instead (it is not shown anywhere)", clip(p.Redacted()))
	case p.Fragment != "" || strings.Contains(u, "#"):
		return fmt.Sprintf("%s has a #fragment, which is never sent: leave it out", clip(u))
	case strings.ContainsAny(u, " \t\r\n"):
		return fmt.Sprintf("%s contains white space: percent-encode it", clip(u))
	}
	return ""
}

// checkNotify checks spec.notify: at most MaxNotify entries, each a
// webhook URL, events among TaskEvents (none twice) and secret, if given,
// a secret's name. Whether the secret is stored is the coordinator's check.
func checkNotify(spec *podiumv1.TaskSpec) error {
	ns := spec.GetNotify()
	if len(ns) > MaxNotify {
		return fieldErr("spec.notify", "has %d entries, more than %d: register a webhook (`podium webhook add`) for more", len(ns), MaxNotify)
	}
	for i, n := range ns {
		field := fmt.Sprintf("spec.notify[%d]", i)
		if n == nil {
			return fieldErr(field, "empty: give the url to POST the event to")
		}
		if p := CheckWebhookURL(n.GetUrl()); p != "" {
			return fieldErr(field+".url", "%s", p)
		}
		for j, e := range n.GetEvents() {
			if !slices.Contains(TaskEvents, e) {
				return fieldErr(fmt.Sprintf("%s.events[%d]", field, j), "%s is not an event a task sends: give %s (or leave events out for both)",
					clip(e), strings.Join(TaskEvents, " or "))
			}
			if slices.Contains(n.GetEvents()[:j], e) {
				return fieldErr(fmt.Sprintf("%s.events[%d]", field, j), "%s is named twice", e)
			}
		}
		if s := n.GetSecret(); s != "" {
			if p := SecretNameProblem(s); p != "" {
				return fieldErr(field+".secret", "%s", p)
			}
		}
	}
	return nil
}

// SecretNames lists the stored secrets a spec names: its secrets and its
// notify entries' signing secrets, each once, for the coordinator's check
// that they exist.
func SecretNames(spec *podiumv1.TaskSpec) []string {
	var names []string
	for _, r := range spec.GetSecrets() {
		names = append(names, r.GetName())
	}
	for _, n := range spec.GetNotify() {
		if s := n.GetSecret(); s != "" && !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	return names
}
