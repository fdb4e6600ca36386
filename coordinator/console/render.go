package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/podiumhq/podium/internal/units"
)

// pageNames are the page templates, each rendered inside layout.html.
var pageNames = []string{"login", "error", "tasks", "task", "nodes", "node", "queue", "system", "schedules", "secrets", "webhooks"}

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return ago(time.Since(t))
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"join": strings.Join,
	// pair hands a template two values (the viewer and a row).
	"pair":  func(a, b any) struct{ A, B any } { return struct{ A, B any }{a, b} },
	"next":  func(n int64) int64 { return n + 1 },
	"prev":  func(n int64) int64 { return n - 1 },
	"bytes": humanBytes,
	// CPU and wall times as podium task get writes them.
	"cpu":  units.CPU,
	"wall": units.Wall,
}

func parsePages() map[string]*template.Template {
	out := make(map[string]*template.Template, len(pageNames))
	for _, p := range pageNames {
		out[p] = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html"))
	}
	return out
}

// pageData is what layout.html renders a page with.
type pageData struct {
	Title  string
	Viewer *viewer
	// Nav is the page the header marks as current.
	Nav  string
	Data any
}

// render renders page into a buffer first, so that a template error is a
// 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, v *viewer, status int, page, title string, data any) {
	c.renderTemplate(w, status, page, "layout", pageData{Title: title, Viewer: v, Nav: page, Data: data})
}

// renderTemplate renders one named template of page's set (a whole page, or
// a fragment such as the log's lines).
func (c *Console) renderTemplate(w http.ResponseWriter, status int, page, name string, data any) {
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		c.log.Error("console template failed", "page", page, "template", name, "err", err)
		http.Error(w, "the console could not render this page; the coordinator's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// humanBytes writes a size as a person reads it.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
