package executor

// A run's artifacts once its task has exited: which files go, and starting
// their upload. Copying files out of the workspace is workspace.go.

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/podiumhq/podium/agent/artifacts"
)

// uploadArtifacts collects what the task left in its artifacts directory,
// notes in the task's log what is skipped and why, and starts uploading the
// rest. It returns nil when there is nothing to wait for.
func (r *run) uploadArtifacts(ctx context.Context) artifacts.Job {
	files, skipped, err := r.collectArtifacts()
	if err != nil {
		r.log.Warn("could not read the task's artifacts directory", "err", err)
		r.note("artifacts: the task's artifacts directory could not be read on the node: %v", err)
		return nil
	}
	for i, s := range skipped {
		if i == maxSkippedNotes {
			r.countedNote("%d more artifacts skipped", len(skipped)-i)
			break
		}
		r.countedNote("artifact %s skipped: %s", s.Name, s.Reason)
	}
	if len(files) == 0 {
		return nil
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	if r.e.uploader == nil {
		r.log.Info("the task left artifacts, but this executor uploads none", "files", len(files), "bytes", total)
		return nil
	}
	r.log.Info("uploading the task's artifacts", "files", len(files), "bytes", total, "skipped", len(skipped))
	return r.e.uploader.Upload(ctx, artifacts.Uploads{
		TaskID: r.key.TaskID, Attempt: r.key.Attempt, Files: files,
		Note:    func(text string) { r.note("%s", text) },
		Pending: r.e.pendingKeeper(r.key, r.dir, r.lastSeq.Load),
	})
}

// collectArtifacts lists the files to upload: those of the artifacts
// directory the spec selects, then those copyWorkspace copied out of the
// rest of the workspace, at most artifacts.MaxFiles in all. A workspace file
// whose name a file of the artifacts directory already has is skipped: the
// file the task put in the artifacts directory, or published, is the one it
// meant by that name.
func (r *run) collectArtifacts() ([]artifacts.File, []artifacts.Skipped, error) {
	dir := filepath.Join(r.dir, artifactsDir)
	var published map[string]bool
	if !r.sel.all {
		var err error
		if published, err = artifacts.Published(dir); err != nil {
			r.log.Warn("could not read the names the task published", "err", err)
			r.note("artifacts: the names of the files published with podium-runner artifact add could not be read (%v); "+
				"they are uploaded only if the spec's artifacts globs select them", err)
		}
	}
	files, skipped, err := artifacts.CollectWhere(dir, r.sel.inArtifactsDir(published))
	if err != nil {
		return nil, nil, err
	}
	skipped = append(skipped, r.workspaceSkipped...)
	if len(r.sel.reads) == 0 {
		return files, skipped, nil
	}
	copied, more, err := artifacts.Collect(filepath.Join(r.dir, workspaceDir))
	if err != nil {
		r.log.Warn("could not read the copy of the task's workspace", "err", err)
		r.note("artifacts: the files copied from the workspace could not be read on the node: %v", err)
	}
	skipped = append(skipped, more...)
	names := make(map[string]bool, len(files))
	for _, f := range files {
		names[f.Name] = true
	}
	for _, f := range copied {
		switch {
		case names[f.Name]:
			skipped = append(skipped, artifacts.Skipped{Name: f.Name,
				Reason: "a file of the same name in " + artifacts.ContainerDir + " is uploaded instead"})
		case len(files) >= artifacts.MaxFiles:
			skipped = append(skipped, artifacts.Skipped{Name: f.Name,
				Reason: fmt.Sprintf("a task uploads at most %d files", artifacts.MaxFiles)})
		default:
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, skipped, nil
}
