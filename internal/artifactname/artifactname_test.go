package artifactname_test

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/internal/artifactname"
)

func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"a",
		"report.xml",
		"out/junit/report.xml",
		".hidden",
		"a/.b/c",
		"a..b",            // dots inside a segment are not a traversal
		"...",             // nor is a segment of three dots
		"résumé – v2.pdf", // UTF-8 and spaces are fine
		"ünïcödé/名前.txt",
		strings.Repeat("a", artifactname.MaxSegmentBytes),
		strings.Repeat(strings.Repeat("d", 200)+"/", 4) + strings.Repeat("f", 1024-4*201),
		strings.Repeat("abcd/", 204) + "abcd", // exactly MaxBytes
	} {
		if err := artifactname.Check(name); err != nil {
			t.Errorf("Check(%q) = %v, want accepted", name, err)
		}
	}
}

// Each kind of bad name is refused with a reason a person can act on.
func TestCheckRefuses(t *testing.T) {
	t.Parallel()
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
		{"\xff\xfe", "not valid UTF-8"},
		{strings.Repeat("a", artifactname.MaxSegmentBytes+1), "path segment is 256 bytes"},
		{strings.Repeat("a/", 600), "more than 1024"},
		{strings.Repeat("a/", 512) + "a", "more than 1024"},
	} {
		err := artifactname.Check(tc.name)
		if err == nil {
			t.Errorf("Check(%q) = nil, want refused (%s)", tc.name, tc.why)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Check(%q) = %q, want it to say %q", tc.name, err, tc.why)
		}
	}
}
