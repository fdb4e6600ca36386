package artifacts

import (
	"errors"
	"strings"
	"testing"
)

// The rules themselves are tested in internal/artifactname; here, that a
// refusal is ErrBadName (what makes it final for the node) and names the
// name, cut short when it is long.
func TestCheckNameRefusalIsErrBadName(t *testing.T) {
	t.Parallel()
	if err := CheckName("out/report.xml"); err != nil {
		t.Fatalf("CheckName(a good name) = %v", err)
	}
	err := CheckName("../etc/passwd")
	if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), `"../etc/passwd"`) || !strings.Contains(err.Error(), `".." segment`) {
		t.Errorf("CheckName(../etc/passwd) = %v, want ErrBadName naming the name and the reason", err)
	}
	long := strings.Repeat("a/", 600)
	err = CheckName(long)
	if !errors.Is(err, ErrBadName) || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "…") {
		t.Errorf("CheckName(a 1200-byte name) = %v, want ErrBadName with the name cut short", err)
	}
}
