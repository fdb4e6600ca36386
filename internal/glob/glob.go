// Package glob matches "/"-separated relative paths against the patterns of
// a task spec's artifacts field: within one path segment *, ? and [...] mean
// what they mean to path.Match (a backslash quotes the next character), and a
// segment that is exactly ** matches any number of whole segments, none
// included. "dist/*.tar.gz" matches dist/app.tar.gz but not
// dist/sub/app.tar.gz; "reports/**/*.xml" matches reports/a.xml and
// reports/unit/b/c.xml.
//
// The CLI and the coordinator check patterns with Parse (through
// internal/taskspec) and the agent matches files with the result, so the
// three cannot disagree about what a pattern means. It is a few lines on top
// of path.Match rather than a library such as doublestar because the rules
// are deliberately narrower: no brace alternatives, no "..", no absolute
// paths, and ** only as a whole segment, where a library would accept more
// than the documentation promises and a pattern would mean whatever that
// library's next version says.
package glob

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxBytes bounds a pattern's length: the same as an artifact's name, which
// no pattern needs to be longer than.
const MaxBytes = 1024

// Pattern is a parsed, valid pattern.
type Pattern struct {
	src  string
	segs []string
}

// Parse checks a pattern and returns it ready to match. Its errors are
// sentences for the person who wrote the pattern, saying what to write
// instead; they do not repeat the pattern's place (the caller knows it).
func Parse(s string) (*Pattern, error) {
	switch {
	case s == "":
		return nil, errors.New("empty: give a path relative to /workspace, e.g. dist/*.tar.gz")
	case len(s) > MaxBytes:
		return nil, fmt.Errorf("is %d bytes long, more than %d", len(s), MaxBytes)
	case !utf8.ValidString(s):
		return nil, errors.New("is not valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return nil, fmt.Errorf("%q contains a control character, which no artifact's name may hold", s)
	case strings.HasPrefix(s, "/"):
		if rel := strings.TrimLeft(strings.TrimPrefix(s, "/workspace/"), "/"); rel != "" && strings.HasPrefix(s, "/workspace/") {
			return nil, fmt.Errorf("%q is absolute: patterns are relative to /workspace; write %s", s, rel)
		}
		return nil, fmt.Errorf("%q is absolute: patterns are relative to /workspace, and only files in the workspace "+
			"can be artifacts (write e.g. dist/*.tar.gz for /workspace/dist/*.tar.gz)", s)
	}
	segs := strings.Split(s, "/")
	for _, seg := range segs {
		switch {
		case seg == "" || seg == ".":
			return nil, fmt.Errorf(`%q has an empty or "." path segment: write it without "./", "//" or a trailing "/" `+
				`(dir/** takes everything under dir)`, s)
		case seg == "..":
			return nil, fmt.Errorf(`%q has a ".." segment: artifacts come only from inside /workspace`, s)
		case seg != "**" && strings.Contains(seg, "**"):
			return nil, fmt.Errorf(`%q has ** inside a path segment: ** stands alone between slashes, as in reports/**/*.xml; `+
				`within a segment write *`, s)
		}
		// path.Match checks the whole pattern even when the name does not
		// match, so this reports an unclosed [ or a trailing \ anywhere.
		if _, err := path.Match(seg, ""); err != nil {
			return nil, fmt.Errorf(`%q is not a valid pattern: a "[" is not closed or a "\" ends a segment `+
				`(write \[ or \\ for the character itself)`, s)
		}
	}
	return &Pattern{src: s, segs: segs}, nil
}

// String is the pattern as it was written.
func (p *Pattern) String() string { return p.src }

// Match reports whether name, a "/"-separated path relative to the same
// directory as the pattern, matches it.
func (p *Pattern) Match(name string) bool {
	names := strings.Split(name, "/")
	// next[j] says whether the segments after the current one match
	// names[j:]; a table rather than recursion, so that a pattern with many
	// ** segments costs len(segs)*len(names), never an exponential search.
	next := make([]bool, len(names)+1)
	next[len(names)] = true
	for i := len(p.segs) - 1; i >= 0; i-- {
		cur := make([]bool, len(names)+1)
		for j := len(names); j >= 0; j-- {
			if p.segs[i] == "**" {
				cur[j] = next[j] || j < len(names) && cur[j+1]
				continue
			}
			if j < len(names) && next[j+1] {
				ok, _ := path.Match(p.segs[i], names[j])
				cur[j] = ok
			}
		}
		next = cur
	}
	return next[0]
}

// Prefix is the pattern's leading segments up to the first one with a
// wildcard or a quoted character: the path that holds every file the pattern
// can match ("dist" for "dist/*.tar.gz", "" for "**/*.xml", the whole
// pattern when it has no wildcard at all). Only that path needs to be read to
// find the pattern's matches.
func (p *Pattern) Prefix() string {
	n := 0
	for n < len(p.segs) && !strings.ContainsAny(p.segs[n], `*?[\`) {
		n++
	}
	return strings.Join(p.segs[:n], "/")
}
