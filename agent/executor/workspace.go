package executor

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/podiumhq/podium/agent/artifacts"
	"github.com/podiumhq/podium/internal/artifactname"
	"github.com/podiumhq/podium/internal/glob"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// workspaceDir, in the attempt's host directory, holds the files of the
// task's workspace that its artifacts globs select outside the artifacts
// directory, copied out of the container after it exited and named by their
// path relative to /workspace. It appears whole or not at all (it is filled
// under workspaceDir+".part" and renamed), so its presence says the copy was
// made, and an agent that restarts after the container is gone uploads from
// it as the first would have.
const workspaceDir = "workspace"

// workspaceCopyTimeout bounds reading the workspace for artifacts. The
// terminal status waits for it, so a pattern that makes the node read a huge
// workspace ("**/*.xml" over a tree of dependencies) must not hold the task
// open for ever; what was copied by then is uploaded.
const workspaceCopyTimeout = 10 * time.Minute

// artifactsRel is the artifacts directory relative to the workspace: its
// files are read on the host, where the bind mount puts them, never copied.
var artifactsRel = strings.TrimPrefix(artifacts.ContainerDir, WorkspaceDir+"/")

// selection is what a task's spec asks to have uploaded.
type selection struct {
	// all is true for a spec without artifacts globs: the whole artifacts
	// directory, exactly as before the globs existed.
	all   bool
	globs []*glob.Pattern
	// reads are the workspace paths to copy out of the container for the
	// globs that reach outside the artifacts directory: each glob's
	// Prefix, with those inside another left out ("" is the whole
	// workspace).
	reads []string
}

// newSelection parses the spec's globs with the rules the coordinator
// checked them by.
func newSelection(spec *podiumv1.TaskSpec) (*selection, error) {
	globs, err := taskspec.ArtifactGlobs("spec.artifacts", spec.GetArtifacts())
	if err != nil {
		return nil, err
	}
	s := &selection{all: len(spec.GetArtifacts()) == 0, globs: globs}
	for _, g := range globs {
		p := g.Prefix()
		if !within(p, artifactsRel) {
			s.reads = append(s.reads, p)
		}
	}
	// Sorted, a path comes right after any path that contains it.
	slices.Sort(s.reads)
	s.reads = slices.Compact(s.reads)
	var kept []string
	for _, p := range s.reads {
		if len(kept) == 0 || !within(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	s.reads = kept
	return s, nil
}

// within says whether the "/"-separated path p is dir or lies under it; every
// path lies within "".
func within(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// match says whether a path relative to the workspace is selected.
func (s *selection) match(rel string) bool {
	for _, g := range s.globs {
		if g.Match(rel) {
			return true
		}
	}
	return false
}

// inArtifactsDir returns what CollectWhere takes from the artifacts
// directory: nil (everything) without globs; with them, what they select and
// whatever the task published with `podium-runner artifact add`, which is
// uploaded whatever the globs say because publishing a file is asking for it.
func (s *selection) inArtifactsDir(published map[string]bool) func(name string) bool {
	if s.all {
		return nil
	}
	return func(name string) bool { return published[name] || s.match(artifactsRel+"/"+name) }
}

// copyWorkspace copies the files the globs select outside the artifacts
// directory from the exited container id into the attempt's workspaceDir,
// and keeps what it skipped, and why, for the task's log. It must run before
// the container is removed: the workspace volume is only reachable through
// it, and the engine reads a stopped container's volumes for an archive.
//
// A read that fails is noted in the task's log and the rest goes on: missing
// artifacts are worth a note, never the task's status. It returns false only
// when ctx ended (the agent is stopping): the container is still there then,
// and the next agent process copies again.
func (r *run) copyWorkspace(ctx context.Context, id string) bool {
	if len(r.sel.reads) == 0 {
		return true
	}
	final := filepath.Join(r.dir, workspaceDir)
	part := final + ".part"
	if err := os.RemoveAll(part); err != nil {
		r.noteCopyFailed("its copy on the node could not be prepared", err)
		return true
	}
	if err := os.MkdirAll(part, 0o755); err != nil {
		r.noteCopyFailed("its copy on the node could not be prepared", err)
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, workspaceCopyTimeout)
	defer cancel()
	x := &extraction{root: part, sel: r.sel, links: map[string]string{}}
	for _, p := range r.sel.reads {
		src := path.Join(WorkspaceDir, p)
		err := r.copyOut(cctx, id, src, x)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return false
		case errors.Is(err, context.DeadlineExceeded):
			r.noteCopyFailed(fmt.Sprintf("reading it took longer than %s; what was read by then is uploaded", workspaceCopyTimeout), nil)
		default:
			r.noteCopyFailed(src+" could not be read", err)
		}
		if cctx.Err() != nil {
			break
		}
	}
	// A copy an earlier agent process made before it stopped is replaced:
	// this one is as complete, and its skipped files are the ones noted.
	err := os.RemoveAll(final)
	if err == nil {
		err = os.Rename(part, final)
	}
	if err != nil {
		r.noteCopyFailed("its copy on the node could not be put in place", err)
	}
	r.workspaceSkipped = x.skipped
	r.log.Info("copied the task's workspace files its artifacts globs select", "files", x.files, "bytes", x.bytes, "skipped", len(x.skipped))
	return true
}

func (r *run) noteCopyFailed(what string, err error) {
	if err != nil {
		what = fmt.Sprintf("%s (%v)", what, err)
	}
	r.log.Warn("artifacts: reading the task's workspace failed", "problem", what)
	r.note("artifacts: the workspace could not be read for the spec's artifacts globs: %s", what)
}

// copyOut extracts what the globs select from one path of the container. A
// path that does not exist is nothing to copy: the globs under it matched
// nothing.
func (r *run) copyOut(ctx context.Context, id, src string, x *extraction) error {
	rc, _, err := r.e.docker.CopyFromContainer(ctx, id, src)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	// Closing the stream is what stops the engine when ctx ends while the
	// extraction is blocked on a read.
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	err = x.extract(rc, path.Dir(src))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// extraction writes the selected regular files of the engine's tar streams
// under root, by their path relative to the workspace. Nothing in a stream is
// trusted: names that are absolute, hold "..", or fall outside the workspace
// are refused, no link is ever created but a hard link to a file this
// extraction wrote itself, and every directory under root is one it made.
type extraction struct {
	root    string
	sel     *selection
	files   int
	bytes   int64
	skipped []artifacts.Skipped
	// links maps the workspace path of each file written to where it was
	// written, for the hard links that refer to it later in a stream.
	links map[string]string
}

func (x *extraction) skip(name, reason string) {
	x.skipped = append(x.skipped, artifacts.Skipped{Name: name, Reason: reason})
}

// extract reads one tar stream whose entry names are relative to parent, a
// directory in the container (the engine names entries after the base name
// of the path asked for).
func (x *extraction) extract(r io.Reader, parent string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the engine's archive: %w", err)
		}
		rel, ok := workspacePath(parent, hdr.Name)
		if !ok || within(rel, artifactsRel) || hdr.Typeflag == tar.TypeDir || !x.sel.match(rel) {
			continue
		}
		if err := x.entry(tr, hdr, rel, parent); err != nil {
			return fmt.Errorf("copying %s to the node: %w", rel, err)
		}
	}
}

// workspacePath turns an entry's name into its path relative to the
// workspace, refusing any that is not strictly inside it.
func workspacePath(parent, name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	if name == "" || strings.HasPrefix(name, "/") {
		return "", false
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", false
		}
	}
	return strings.CutPrefix(path.Join(parent, name), WorkspaceDir+"/")
}

// entry handles one selected entry. Only a failure to write on the node is
// an error; anything the task left that cannot be an artifact is skipped.
func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header, rel, parent string) error {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeLink:
	case tar.TypeSymlink:
		x.skip(rel, "it is a symbolic link; only regular files are uploaded")
		return nil
	case tar.TypeFifo:
		x.skip(rel, "it is not a regular file (a FIFO)")
		return nil
	case tar.TypeChar, tar.TypeBlock:
		x.skip(rel, "it is not a regular file (a device)")
		return nil
	default:
		x.skip(rel, fmt.Sprintf("it is not a regular file (tar type %q)", hdr.Typeflag))
		return nil
	}
	if err := artifactname.Check(rel); err != nil {
		x.skip(rel, "its name cannot be an artifact's name: "+err.Error())
		return nil
	}
	if x.files >= artifacts.MaxFiles {
		x.skip(rel, fmt.Sprintf("a task uploads at most %d files", artifacts.MaxFiles))
		return nil
	}
	dst := filepath.Join(x.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeLink {
		// The engine sends a file with several names in the stream once,
		// and each later name as a hard link to the first.
		target, ok := workspacePath(parent, hdr.Linkname)
		written, wrote := x.links[target]
		if !ok || !wrote {
			x.skip(rel, fmt.Sprintf("it is a hard link to %s, which is not among the artifacts; select that file too, or copy it", hdr.Linkname))
			return nil
		}
		if err := os.Link(written, dst); err != nil {
			return err
		}
	} else {
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// Half a file must not be uploaded as if it were the file.
			_ = os.Remove(dst)
			return err
		}
		x.links[rel] = dst
	}
	x.files++
	x.bytes += hdr.Size
	return nil
}

// checkWorkspaceCopied notes, for a task whose container was gone when this
// agent process took it over, that files outside the artifacts directory the
// globs select could not be collected, unless an earlier process copied them.
func (r *run) checkWorkspaceCopied() {
	if len(r.sel.reads) == 0 {
		return
	}
	if st, err := os.Stat(filepath.Join(r.dir, workspaceDir)); err == nil && st.IsDir() {
		return
	}
	r.log.Warn("the task's container was removed before its workspace was read for artifacts")
	r.note("artifacts: the files the spec's artifacts globs select outside %s were not collected: "+
		"the task's container was removed before the agent could read its workspace", artifacts.ContainerDir)
}
