package executor

import (
	"strings"
	"testing"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/agent/inbox"
	"github.com/podiumhq/podium/agent/runner"
	"github.com/podiumhq/podium/internal/taskspec"
)

// Every place the agent mounts something into a task's container lies
// under one of taskspec.ReservedPaths, which a spec's tmpfs may not cover:
// a mount added here without a reserved path would let a tmpfs hide it.
func TestReservedPathsCoverEveryMount(t *testing.T) {
	for _, target := range []string{runner.Path, runner.LogPath, runner.ProgressPath, runner.LeasePath, WorkspaceDir, artifacts.ContainerDir,
		inbox.ContainerDir, runner.SecretsDir} {
		covered := false
		for _, r := range taskspec.ReservedPaths {
			covered = covered || target == r || strings.HasPrefix(target, r+"/")
		}
		if !covered {
			t.Errorf("the agent mounts %s, which no taskspec.ReservedPaths entry covers", target)
		}
		if p := taskspec.TmpfsPathProblem(target); p == "" {
			t.Errorf("a spec may mount a tmpfs at %s, where the agent mounts its own", target)
		}
	}
}
