package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/podiumhq/podium/bench/benchkit"
)

// newCLI is the podium CLI pointed at the coordinator with the benchmark's
// token; its stderr is kept for the report should it fail.
func newCLI(ctx context.Context, bin, url string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PODIUM_SERVER="+url, "PODIUM_TOKEN="+benchkit.APIToken)
	cmd.Stderr = &bytes.Buffer{}
	return cmd
}

// lastLine is the last line a CLI wrote on stderr.
func lastLine(w io.Writer) string {
	b, ok := w.(*bytes.Buffer)
	if !ok {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	return lines[len(lines)-1]
}

// pprofTop is the top of a CPU profile by its own (flat) time, as go tool pprof
// prints it.
func pprofTop(ctx context.Context, path string) string {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "go tool pprof: " + err.Error() + "\n" + string(out)
	}
	return string(out)
}
