package soak

import (
	"fmt"
	"os"
	"testing"

	"github.com/podiumhq/podium/test/testenv/binaries"
)

// binDir holds the binaries built once for this test binary.
var binDir string

func TestMain(m *testing.M) {
	dir, remove, err := binaries.Temp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	remove()
	os.Exit(code)
}
