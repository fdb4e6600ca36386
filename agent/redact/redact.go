// Package redact replaces the values of a task's secrets in its output with
// "[redacted:NAME]" before the output leaves the agent.
//
// A task's output is the one place a secret handed to it can leak by
// accident: a debug line, `env`, a failing curl that prints its URL, a tool
// that base64s its credentials into a header it logs. So a secret is looked
// for not only as itself but in the forms tools commonly print it in: base64
// (standard and URL alphabets, with and without padding, and the part of a
// longer base64 stream that encodes it at any of the three byte offsets),
// URL query escaping, and hex in both cases.
//
// Output arrives in pieces (each a write of the task), and a secret can be
// split across any two of them, so redaction is streaming: a Stream holds
// back the end of what it was given while that end could still be the start
// of a secret (never more than the longest pattern less one byte) and hands
// it on once the next piece, or Flush, settles it.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"sort"
	"strings"
)

// MinLen is the shortest secret value that is redacted. Shorter values
// ("yes", "1234") occur in ordinary output so often that replacing them
// would wreck the output and, by where it is replaced, tell the value.
const MinLen = 6

// MaxEncoded is the longest value whose encodings are looked for too;
// longer ones (a large file) are looked for as they are and line by line.
// Their encodings would cost the agent several times their size, for each
// attempt, to catch a form nobody prints whole.
const MaxEncoded = 64 << 10

// Secret is a value to redact and the name it is replaced with.
type Secret struct {
	Name  string
	Value []byte
}

type pattern struct {
	text []byte
	repl []byte
}

// Redactor is the set of patterns of an attempt's secrets. It is immutable
// and safe for concurrent use; each output stream takes its own Stream.
type Redactor struct {
	// byPrefix indexes the patterns by their first two bytes, each list
	// longest first, so the longest pattern at a position wins.
	byPrefix map[uint16][]pattern
	first    [256]bool
	maxLen   int
}

// New builds a redactor for secrets. Values shorter than MinLen are left
// alone (see MinLen); each line of a value of several lines is redacted too
// (lines shorter than MinLen are not). It returns nil when there is nothing to redact; a nil
// Redactor passes everything through.
func New(secrets []Secret) *Redactor {
	// Sorting by name makes the name a shared value is shown under the
	// same on every run and every agent.
	secrets = append([]Secret(nil), secrets...)
	sort.SliceStable(secrets, func(i, j int) bool { return secrets[i].Name < secrets[j].Name })
	seen := make(map[string]bool)
	r := &Redactor{byPrefix: make(map[uint16][]pattern)}
	for _, s := range secrets {
		if len(s.Value) < MinLen {
			continue
		}
		repl := []byte("[redacted:" + s.Name + "]")
		for _, f := range Patterns(s.Value) {
			if len(f) < MinLen || seen[f] {
				continue
			}
			seen[f] = true
			k := uint16(f[0])<<8 | uint16(f[1])
			r.byPrefix[k] = append(r.byPrefix[k], pattern{text: []byte(f), repl: repl})
			r.first[f[0]] = true
			r.maxLen = max(r.maxLen, len(f))
		}
	}
	if r.maxLen == 0 {
		return nil
	}
	for k, ps := range r.byPrefix {
		sort.SliceStable(ps, func(i, j int) bool { return len(ps[i].text) > len(ps[j].text) })
		r.byPrefix[k] = ps
	}
	return r
}

// MaxHold is the most a Stream of r holds back: the longest pattern less
// one byte.
func (r *Redactor) MaxHold() int {
	if r == nil {
		return 0
	}
	return r.maxLen - 1
}

// Patterns are the texts New replaces for a value (before dropping those
// shorter than MinLen): its Forms, or only the value itself past
// MaxEncoded, and each line of a value of several, so that output shown
// line by line (a sidecar's) never shows a line of a key file.
func Patterns(v []byte) []string {
	forms := []string{string(v)}
	if len(v) <= MaxEncoded {
		forms = Forms(v)
	}
	for _, line := range strings.Split(string(v), "\n") {
		if line = strings.TrimRight(line, "\r"); line != string(v) {
			forms = append(forms, line)
		}
	}
	return forms
}

// Forms returns the texts a value is looked for as: itself, base64 (std and
// URL alphabets, padded and not, and the stable middle of the value encoded
// at each byte offset of a longer stream), URL query escaping, and hex
// (lower and upper case). Duplicates are possible; New drops them.
func Forms(v []byte) []string {
	forms := []string{string(v)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		forms = append(forms, enc.EncodeToString(v), enc.WithPadding(base64.NoPadding).EncodeToString(v))
		raw := enc.WithPadding(base64.NoPadding)
		// The value at byte offset k of a longer stream: encode it behind
		// k bytes, then drop the characters that also carry bits of the
		// bytes before it (k=1: 2, k=2: 3) and the last one when it also
		// carries bits of the bytes after it.
		for k, drop := range []int{0, 2, 3} {
			buf := make([]byte, k+len(v))
			copy(buf[k:], v)
			e := raw.EncodeToString(buf)[drop:]
			if (k+len(v))%3 != 0 {
				e = e[:len(e)-1]
			}
			forms = append(forms, e)
		}
	}
	if q := url.QueryEscape(string(v)); q != string(v) {
		forms = append(forms, q)
	}
	h := hex.EncodeToString(v)
	forms = append(forms, h, strings.ToUpper(h))
	return forms
}

// match returns the longest pattern that matches at the start of b, or nil.
// more reports that b is a proper prefix of a pattern longer than the match:
// what follows b decides, so the caller must wait for it.
func (r *Redactor) match(b []byte) (p *pattern, more bool) {
	if len(b) == 0 || !r.first[b[0]] {
		return nil, false
	}
	if len(b) == 1 {
		// Any pattern starting with this byte may follow.
		return nil, true
	}
	ps := r.byPrefix[uint16(b[0])<<8|uint16(b[1])]
	for i := range ps {
		t := ps[i].text
		if len(t) > len(b) {
			if bytes.HasPrefix(t, b) {
				return nil, true
			}
			continue
		}
		if bytes.Equal(b[:len(t)], t) {
			return &ps[i], false
		}
	}
	return nil, false
}

// String redacts one whole text, such as a note, holding nothing back.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	var st Stream
	st.r = r
	out := st.Write(nil, []byte(s))
	return string(st.Flush(out))
}

// Stream redacts one output stream.
func (r *Redactor) Stream() *Stream { return &Stream{r: r} }

// Stream is the redaction of one stream of output. It is not safe for
// concurrent use.
type Stream struct {
	r    *Redactor
	held []byte
}

// Held is how many bytes of what was written are held back.
func (s *Stream) Held() int { return len(s.held) }

// Write appends to dst what can be handed on of the stream once p is added
// to it, redacted, and holds back the rest: the shortest end of the stream
// that could still be the start of a secret.
func (s *Stream) Write(dst, p []byte) []byte {
	if s.r == nil {
		return append(dst, p...)
	}
	buf := p
	if len(s.held) > 0 {
		buf = append(s.held, p...)
	}
	dst, rest := s.r.scan(dst, buf, false)
	s.held = append(s.held[:0:0], rest...)
	return dst
}

// Flush appends what is held back to dst, redacted, and empties the stream.
// A stream is flushed when its output ends (the task exited) or must be
// handed on whole.
func (s *Stream) Flush(dst []byte) []byte {
	if s.r == nil || len(s.held) == 0 {
		return dst
	}
	dst, _ = s.r.scan(dst, s.held, true)
	s.held = nil
	return dst
}

// scan redacts buf onto dst, leftmost longest match first. Unless final, it
// stops at the first position whose match depends on bytes not yet seen and
// returns the bytes from there.
func (r *Redactor) scan(dst, buf []byte, final bool) ([]byte, []byte) {
	i, lit := 0, 0
	for i < len(buf) {
		// Skip fast to the next byte that can start a pattern.
		j := i
		for j < len(buf) && !r.first[buf[j]] {
			j++
		}
		if j == len(buf) {
			break
		}
		i = j
		end := min(len(buf), i+r.maxLen)
		p, more := r.match(buf[i:end])
		if more && !final && end == len(buf) {
			dst = append(dst, buf[lit:i]...)
			return dst, buf[i:]
		}
		if more && p == nil {
			// final: the longer pattern never came; try what fits.
			p = r.matchShort(buf[i:end])
		}
		if p == nil {
			i++
			continue
		}
		dst = append(dst, buf[lit:i]...)
		dst = append(dst, p.repl...)
		i += len(p.text)
		lit = i
	}
	return append(dst, buf[lit:]...), nil
}

// matchShort is match for the end of a stream: the longest pattern wholly
// within b.
func (r *Redactor) matchShort(b []byte) *pattern {
	if len(b) < 2 {
		return nil
	}
	ps := r.byPrefix[uint16(b[0])<<8|uint16(b[1])]
	for i := range ps {
		if t := ps[i].text; len(t) <= len(b) && bytes.Equal(b[:len(t)], t) {
			return &ps[i]
		}
	}
	return nil
}
