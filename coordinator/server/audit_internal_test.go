package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A refused request's target is audited as sent; a hostile one is kept to
// maxTarget bytes, still valid UTF-8, saying how long it was.
func TestAuditTargetIsBounded(t *testing.T) {
	if got := boundTarget("task_01ABC"); got != "task_01ABC" {
		t.Fatalf("a short target became %q", got)
	}
	long := strings.Repeat("é", 100_000) // 200,000 bytes, 2 per rune
	got := boundTarget("x" + long)
	if len(got) > maxTarget+32 || !utf8.ValidString(got) || !strings.HasSuffix(got, "(200001 bytes)") {
		t.Fatalf("a 200,001-byte target became %d bytes (valid UTF-8: %t): %q…", len(got), utf8.ValidString(got), got[:40])
	}
}
