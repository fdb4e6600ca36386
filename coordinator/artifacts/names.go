package artifacts

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on an artifact's name. A segment is one path component; 255 bytes is
// what common filesystems allow, so a name that passes here can be written
// back to disk by whoever downloads it.
const (
	MaxNameBytes    = 1024
	MaxSegmentBytes = 255
)

// CheckName refuses an artifact name that could escape wherever it is later
// written, or that would confuse whoever reads it. A name is a "/"-separated
// path relative to the task's workspace.
//
// It refuses rather than repairs: a name that was "cleaned" would no longer be
// the one the task wrote, and two different bad names could clean to the same
// good one and silently replace each other. The object key in the bucket never
// contains the name at all; these rules protect the people and tools that
// download an artifact under its name (podium artifact get, a browser following
// a presigned URL).
func CheckName(name string) error {
	if name == "" {
		return badName(name, "it is empty")
	}
	if len(name) > MaxNameBytes {
		return badName(name, fmt.Sprintf("it is %d bytes, more than %d", len(name), MaxNameBytes))
	}
	if !utf8.ValidString(name) {
		return badName(name, "it is not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return badName(name, fmt.Sprintf("it contains the control character %U", r))
		}
	}
	if strings.ContainsRune(name, '\\') {
		return badName(name, `it contains a backslash; separate directories with "/"`)
	}
	if strings.HasPrefix(name, "/") {
		return badName(name, "it is an absolute path; give it relative to the task's workspace")
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "":
			return badName(name, `it has an empty path segment ("//" or a trailing "/")`)
		case seg == "." || seg == "..":
			return badName(name, fmt.Sprintf("it has a %q segment; names may not walk the directory tree", seg))
		case len(seg) > MaxSegmentBytes:
			return badName(name, fmt.Sprintf("a path segment is %d bytes, more than %d", len(seg), MaxSegmentBytes))
		}
	}
	return nil
}

func badName(name, why string) error {
	if len(name) > 80 {
		name = name[:80] + "…"
	}
	return fmt.Errorf("%w: %q: %s", ErrBadName, name, why)
}
