// Package artifactname holds the one set of rules for an artifact's name.
// The agent checks a name before it uploads (so a file it cannot send
// becomes a note in the task's log, not an upload that fails) and the
// coordinator checks it again before it stores (it trusts no node). Both
// import this package, so the two checks cannot drift apart: a name the
// node lets through is one the coordinator takes.
//
// It imports only the standard library: podium-runner, a small static binary
// run inside every task container, checks names with it too.
package artifactname

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on an artifact's name. A segment is one path component; 255 bytes is
// what common filesystems allow, so a name that passes here can be written
// back to disk by whoever downloads it.
const (
	MaxBytes        = 1024
	MaxSegmentBytes = 255
)

// Check refuses a name that could escape wherever it is later written, or
// that would confuse whoever reads it. A name is a "/"-separated path
// relative to the task's workspace.
//
// It refuses rather than repairs: a name that was "cleaned" would no longer
// be the one the task wrote, and two different bad names could clean to the
// same good one and silently replace each other. The object key in the bucket
// never contains the name at all; these rules protect the people and tools
// that download an artifact under its name (podium artifact get, a browser
// following a presigned URL).
//
// The error is only the reason ("it is empty", "it has a \"..\" segment…"),
// worded to follow the name: each caller says whose name it was and what
// happens to it.
func Check(name string) error {
	if name == "" {
		return errors.New("it is empty")
	}
	if len(name) > MaxBytes {
		return fmt.Errorf("it is %d bytes, more than %d", len(name), MaxBytes)
	}
	if !utf8.ValidString(name) {
		return errors.New("it is not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("it contains the control character %U", r)
		}
	}
	if strings.ContainsRune(name, '\\') {
		return errors.New(`it contains a backslash; separate directories with "/"`)
	}
	if strings.HasPrefix(name, "/") {
		return errors.New("it is an absolute path; give it relative to the task's workspace")
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "":
			return errors.New(`it has an empty path segment ("//" or a trailing "/")`)
		case seg == "." || seg == "..":
			return fmt.Errorf("it has a %q segment; names may not walk the directory tree", seg)
		case len(seg) > MaxSegmentBytes:
			return fmt.Errorf("a path segment is %d bytes, more than %d", len(seg), MaxSegmentBytes)
		}
	}
	return nil
}
