package artifacts

import (
	"fmt"

	"github.com/podiumhq/podium/internal/artifactname"
)

// CheckName refuses a name by the rules in internal/artifactname, the same
// ones the node applies before it uploads. The coordinator checks again
// because it trusts no node: a node with an older or altered agent could send
// anything. The error wraps ErrBadName, which the upload handler turns into a
// final refusal, and quotes the name so the node's log says which file it was.
func CheckName(name string) error {
	if err := artifactname.Check(name); err != nil {
		if len(name) > 80 {
			name = name[:80] + "…"
		}
		return fmt.Errorf("%w: %q: %v", ErrBadName, name, err)
	}
	return nil
}
