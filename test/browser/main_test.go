package browser

import (
	"fmt"
	"os"
	"testing"

	"github.com/podiumhq/podium/test/testenv/binaries"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// binDir holds the podium, podium-agent and podium-runner binaries built
// once for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, remove, err := binaries.Temp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "browsertest:", err)
		os.Exit(2)
	}
	binDir = dir
	code := pgtest.Run(m)
	closeBrowser()
	remove()
	os.Exit(code)
}
