package artifacts

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckNameAccepts(t *testing.T) {
	for _, name := range []string{
		"report.xml",
		"out/junit/report.xml",
		".hidden",
		"a..b",            // dots inside a segment are not a traversal
		"...",             // nor is a segment of three dots
		"résumé – v2.pdf", // UTF-8 and spaces are fine
		strings.Repeat("a", MaxSegmentBytes),
		strings.Repeat(strings.Repeat("d", 200)+"/", 4) + strings.Repeat("f", 1024-4*201),
	} {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v, want accepted", name, err)
		}
	}
}

// Each kind of bad name is refused with ErrBadName and a reason a person can
// act on.
func TestCheckNameRefuses(t *testing.T) {
	for _, tc := range []struct{ name, why string }{
		{"", "empty"},
		{"..", `".." segment`},
		{"../etc/passwd", `".." segment`},
		{"out/../../etc/passwd", `".." segment`},
		{"out/..", `".." segment`},
		{"./report.xml", `"." segment`},
		{"out/./report.xml", `"." segment`},
		{"/etc/passwd", "absolute path"},
		{"/", "absolute path"},
		{"out//report.xml", "empty path segment"},
		{"out/", "empty path segment"},
		{`out\..\x`, "backslash"},
		{`C:\Windows`, "backslash"},
		{"new\nline", "control character U+000A"},
		{"nul\x00byte", "control character U+0000"},
		{"tab\there", "control character U+0009"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0085", "control character U+0085"},
		{"bad\xffutf8", "not valid UTF-8"},
		{strings.Repeat("a", MaxSegmentBytes+1), "path segment is 256 bytes"},
		{strings.Repeat("a/", 600), "more than 1024"},
	} {
		err := CheckName(tc.name)
		if !errors.Is(err, ErrBadName) {
			t.Errorf("CheckName(%q) = %v, want ErrBadName", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("CheckName(%q) = %q, want it to say %q", tc.name, err, tc.why)
		}
	}
}
