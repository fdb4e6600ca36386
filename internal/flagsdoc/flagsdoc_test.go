package flagsdoc

import (
	"flag"
	"strings"
	"testing"
)

// Flags are listed as --name ARG with their usage and default, a short
// alias beside its long flag, skipped ones left out.
func TestPrint(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("image", "", "the `IMAGE` to run")
	fs.Int("max-tasks", 4, "how many tasks at once")
	fs.Bool("detach", false, "print the id and exit")
	fs.String("server", "", "the coordinator")
	Alias(fs, "d", "detach")
	var b strings.Builder
	Print(&b, fs, func(n string) bool { return n == "server" })
	out := b.String()
	for _, want := range []string{"  -d, --detach", "  --image IMAGE", "the IMAGE to run", "  --max-tasks int", `how many tasks at once (default "4")`} {
		if !strings.Contains(out, want) {
			t.Errorf("Print lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "server") || strings.Contains(out, "alias of") || strings.Contains(out, "\n  -d ") || strings.Contains(out, "\n  -image") {
		t.Errorf("Print shows a skipped flag, an alias on its own line, or Go's -flag layout:\n%s", out)
	}
}
