// Package binaries builds Podium's commands for tests that drive the real
// binaries (internal/e2e, internal/faults): once per test binary, into a
// temporary directory, laid out as `make build` lays them out. Production
// code never imports it.
package binaries

import (
	"fmt"
	"os"
	"os/exec"
)

const module = "github.com/podiumhq/podium/cmd/"

// Build builds podium, podium-agent and podium-coordinator into dir, and
// podium-runner next to them. The runner goes next to podium-agent because
// that is where the agent looks for it, and it is static (CGO_ENABLED=0), as
// `make build` makes it, since it runs inside task images that have no C
// library. It is built on its own so that the others keep the build cache of
// an ordinary `go build`. The go tool's output goes to stderr.
func Build(dir string) error {
	build := exec.Command("go", "build", "-o", dir+"/", module+"podium", module+"podium-agent", module+"podium-coordinator")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	runner := exec.Command("go", "build", "-o", dir+"/", module+"podium-runner")
	runner.Env = append(os.Environ(), "CGO_ENABLED=0")
	runner.Stdout, runner.Stderr = os.Stderr, os.Stderr
	for _, b := range []*exec.Cmd{build, runner} {
		if err := b.Run(); err != nil {
			return fmt.Errorf("build the binaries (%v): %w", b.Args, err)
		}
	}
	return nil
}

// Temp builds the binaries into a new temporary directory and returns it
// with a function that removes it, for a TestMain:
//
//	dir, remove, err := binaries.Temp()
//	if err != nil { fmt.Fprintln(os.Stderr, err); os.Exit(2) }
//	code := m.Run()
//	remove()
//	os.Exit(code)
func Temp() (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "podium-test-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	if err := Build(dir); err != nil {
		remove()
		return "", nil, err
	}
	return dir, remove, nil
}
