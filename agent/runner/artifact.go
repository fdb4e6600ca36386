package runner

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/podiumhq/podium/agent/artifacts"
)

// ExitArtifactFailed is what `artifact add` exits with when the file could
// not be added (it does not exist, say).
const ExitArtifactFailed = 1

// artifact runs `podium-runner artifact SUBCOMMAND`.
func artifact(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprint(stderr, "podium-runner artifact: want: podium-runner artifact add PATH [--name NAME]\n")
		return ExitUsage
	}
	return artifactAdd(args[1:], stderr)
}

func artifactAdd(args []string, stderr io.Writer) int {
	dflt := os.Getenv(artifacts.DirEnv)
	if dflt == "" {
		dflt = artifacts.ContainerDir
	}
	fs := flag.NewFlagSet("artifact add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the artifact's name, a relative path such as reports/junit.xml (default: PATH's base name)")
	dir := fs.String("dir", dflt, "the task's artifacts directory (default $"+artifacts.DirEnv+" or "+artifacts.ContainerDir+")")
	// Flags may come before or after PATH: `artifact add out.xml --name x`
	// reads as naturally as the other way round.
	var paths []string
	for {
		if err := fs.Parse(args); err != nil {
			return ExitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(paths) != 1 {
		fmt.Fprintf(stderr, "podium-runner artifact add: want exactly one PATH, got %d: podium-runner artifact add PATH [--name NAME]\n", len(paths))
		return ExitUsage
	}
	src := paths[0]
	n := *name
	if n == "" {
		n = filepath.Base(src)
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		fmt.Fprintf(stderr, "podium-runner artifact add: there is no artifacts directory at %s: artifact add publishes a file "+
			"of a Podium task and runs inside one (elsewhere, pass --dir DIR)\n", *dir)
		return ExitRunnerError
	}
	if err := artifacts.Publish(*dir, src, n); err != nil {
		fmt.Fprintf(stderr, "podium-runner artifact add: %v\n", err)
		return ExitArtifactFailed
	}
	return 0
}
