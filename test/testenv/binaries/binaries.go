// Package binaries builds Podium's commands for tests that drive the real
// binaries (test/e2e, test/faults): once per test binary, into a
// temporary directory, laid out as `make build` lays them out. Production
// code never imports it.
package binaries

import (
	"fmt"
	"os"
	"os/exec"
)

const module = "github.com/podiumhq/podium/cmd/"

// Build builds podium, podium-agent, podium-coordinator and podium-runner
// into dir, laid out as `make build` lays them out (the agent looks for the
// runner next to itself) and with its flags: static (CGO_ENABLED=0, as the
// runner must be to run inside task images that have no C library, and as
// the packages ship the rest) and -trimpath. Building them as they ship also
// lets the tests, `make build` and the packaging share one build cache,
// which on a fresh CI machine is minutes of compiling saved. The go tool's
// output goes to stderr.
func Build(dir string) error {
	return BuildVersion(dir, "", commands...)
}

// BuildVersion is Build of the named commands (all four when none) stamped
// with version, as scripts/ldflags.sh stamps a release ("" leaves the
// binaries' own "dev"): for a test that needs binaries that say they are of
// some release. Only the linking differs from Build's, so the two share
// what they compile.
func BuildVersion(dir, version string, cmds ...string) error {
	if len(cmds) == 0 {
		cmds = commands
	}
	args := []string{"build", "-trimpath", "-o", dir + "/"}
	if version != "" {
		args = append(args, "-ldflags", "-X github.com/podiumhq/podium/internal/version.Version="+version)
	}
	for _, c := range cmds {
		args = append(args, module+c)
	}
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the binaries (%v): %w", build.Args, err)
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
