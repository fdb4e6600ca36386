// Package artifacts is the node's side of a task's artifacts: the directory a
// task leaves files in, how those files are named, collecting them when the
// task exits, and `podium-runner artifact add`, which publishes a file while
// the task runs. Uploading them is package artifacts/upload.
//
// # The directory
//
// Every task container has ContainerDir, /workspace/.podium/artifacts, a bind
// mount of the attempt's host directory <data>/tasks/<task>-<attempt>/artifacts
// (mode 0777, so a task running as any user can write it). It is mounted over
// the workspace volume, so the agent reads the files on the host without
// asking Docker, and they are there even when the container is gone.
//
// When the task's container has exited, every regular file under the
// directory becomes an artifact named by its path relative to it, "/"-separated
// ("reports/junit.xml"). Symbolic links (which would point at the node's own
// files), FIFOs, sockets and devices, names the coordinator would refuse, and
// files past MaxFiles are skipped, each with a note in the task's log saying
// why. Files `podium-runner artifact add`
// was still writing when the task was killed (see TempPrefix) are skipped too.
//
// `podium-runner artifact add PATH [--name NAME]` copies PATH into the
// directory under NAME (default: PATH's base name): into a temporary file
// first, renamed into place once complete, so the agent never collects half a
// copy and the task may change or delete PATH afterwards. The copy is uploaded
// with everything else when the task exits.
//
// A task spec's artifacts globs may narrow what is collected (CollectWhere).
// A published file is uploaded whatever they say, so Publish records each
// name it publishes in PublishedList, which Published reads back.
//
// Names are checked by internal/artifactname, the rules the coordinator
// applies too. This package imports only the standard library, that and
// agent/taskfile (how the agent reads the directory, which the task writes):
// podium-runner, which must stay a small static binary, uses it.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/agent/taskfile"
	"github.com/podiumhq/podium/internal/artifactname"
)

// ContainerDir is where a task's artifacts directory is mounted in its
// container.
const ContainerDir = "/workspace/.podium/artifacts"

// DirEnv names the environment variable that overrides ContainerDir for
// `podium-runner artifact add`, for running it outside a container.
const DirEnv = "PODIUM_ARTIFACTS"

// TempPrefix starts the name of the temporary file `artifact add` copies
// into before renaming it into place. Collect skips such files: one can only
// be left when the task was killed in the middle of a copy.
const TempPrefix = ".podium-add-"

// PublishedList is the file at the top of the artifacts directory in which
// Publish records, one a line, the name of every file it published: the
// agent cannot tell a published file from one the task wrote there itself
// once the copy is renamed into place, and only the published ones are
// uploaded whatever the spec's globs say. It is never an artifact itself.
const PublishedList = ".podium-published"

// maxPublishedListBytes bounds what Published reads: MaxFiles names of the
// longest kind, with room for a task that publishes some of them again.
const maxPublishedListBytes = 4 * MaxFiles * (artifactname.MaxBytes + 1)

// MaxFiles is the most files one task attempt uploads. A task that leaves
// more (a build that writes its object files there by mistake, say) has the
// rest skipped with a note, instead of tying its node up with uploads.
const MaxFiles = 1000

// File is one artifact found on the host.
type File struct {
	// Name is the artifact's name: the path relative to the artifacts
	// directory, "/"-separated.
	Name string
	// Path is the file on the host.
	Path string
	// Size is its size when it was collected.
	Size int64
}

// Skipped is something in the artifacts directory that is not uploaded.
type Skipped struct {
	Name   string
	Reason string
}

// UploadWindow is how long after an attempt ended the coordinator takes its
// artifacts (UploadGrace in coordinator/artifacts). Past it an upload is
// refused, so the node stops trying, and forgets what it kept for a retry.
const UploadWindow = 10 * time.Minute

// Uploader takes the artifacts of a task attempt that has ended (package
// artifacts/upload is the real one).
type Uploader interface {
	Upload(ctx context.Context, u Uploads) Job
}

// Uploads is the files of one task attempt, for an Uploader.
type Uploads struct {
	TaskID  string
	Attempt int32
	Files   []File
	// Note writes a line into the task's log; nil writes nothing.
	Note func(text string)
	// EndedAt, when set, is when the attempt's final status was sent, by an
	// earlier agent process: the job starts as if Ended had been called then,
	// so its window is the one the coordinator applies. It does not write
	// the "upload failed … (will retry)" note again: the earlier process did.
	EndedAt time.Time
	// Pending, when set, is told which files are still to be sent whenever
	// that changes once the attempt has ended (at Ended, or at once with
	// EndedAt, and after each file is stored or given up), last with none
	// when nothing is left. It is not told when the job ends because ctx did:
	// the files it was last told of are the ones a restarted agent resumes.
	// Calls come one at a time, in order.
	Pending func(endedAt time.Time, files []File)
}

// Job is the uploads of one task attempt.
type Job interface {
	// Tried is closed once every file has been tried once, whether or not it
	// was stored. The node reports the task's final status after that (or
	// after a bounded wait), so that in the usual case the artifacts are
	// stored, and noted in the log, before the task counts as ended.
	Tried() <-chan struct{}
	// Ended says the task's final status has been sent: the coordinator's
	// window for uploads (10 minutes after the attempt ended) starts now, and
	// retries stop when it closes.
	Ended()
	// Done is closed when every file is stored or given up on. The files
	// are read until then; the attempt's host directory goes after it.
	Done() <-chan struct{}
}

// Prepare creates an artifacts directory that any user can write: the task
// runs as whatever user its image names.
func Prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777)
}

// Collect lists the artifacts in dir, sorted by name, and what it skipped and
// why. A directory that does not exist holds no artifacts. Only a failure to
// read dir itself is an error; a subdirectory that cannot be read is skipped.
func Collect(dir string) ([]File, []Skipped, error) { return CollectWhere(dir, nil) }

// CollectWhere is Collect of only the names want accepts (all of them when
// want is nil). Anything else under dir is passed over without a note,
// whatever it is, and does not count towards MaxFiles: what the task's spec
// did not ask for is none of its artifacts' business.
//
// The directory is the task's, so it is walked through package taskfile: each
// subdirectory is opened beneath dir without following a link, and each
// file's size comes from a descriptor reached the same way, so a link the
// task planted anywhere is reported, never followed.
func CollectWhere(dir string, want func(name string) bool) ([]File, []Skipped, error) {
	d, err := taskfile.OpenDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	c := &collection{d: d, dir: dir, want: want}
	entries, err := d.ReadDir(".")
	if err != nil {
		return nil, nil, err
	}
	c.walk("", entries)
	sort.Slice(c.files, func(i, j int) bool { return c.files[i].Name < c.files[j].Name })
	return c.files, c.skipped, nil
}

// collection is one CollectWhere in progress.
type collection struct {
	d       *taskfile.Dir
	dir     string
	want    func(name string) bool
	files   []File
	skipped []Skipped
}

func (c *collection) skip(name, reason string) {
	c.skipped = append(c.skipped, Skipped{Name: name, Reason: reason})
}

// walk goes through the entries of the directory rel ("" for the top),
// depth first, in name order.
func (c *collection) walk(rel string, entries []fs.DirEntry) {
	for _, e := range entries {
		name := path.Join(rel, e.Name())
		mode := e.Type()
		if rel == "" && name == PublishedList || c.want != nil && !e.IsDir() && !c.want(name) {
			continue
		}
		switch {
		case mode&fs.ModeSymlink != 0:
			c.skip(name, "it is a symbolic link; only regular files are uploaded")
			continue
		case e.IsDir():
			sub, err := c.d.ReadDir(name)
			if err != nil {
				c.skip(name, fmt.Sprintf("it could not be read (%v)", unwrapPath(err)))
				continue
			}
			c.walk(name, sub)
			continue
		case !mode.IsRegular():
			c.skip(name, "it is not a regular file ("+kindOf(mode)+")")
			continue
		case strings.HasPrefix(e.Name(), TempPrefix):
			c.skip(name, "it is a copy `podium-runner artifact add` did not finish")
			continue
		}
		if err := artifactname.Check(name); err != nil {
			c.skip(name, "its name cannot be an artifact's name: "+err.Error())
			continue
		}
		if len(c.files) >= MaxFiles {
			c.skip(name, fmt.Sprintf("a task uploads at most %d files", MaxFiles))
			continue
		}
		info, err := c.d.Lstat(name)
		if err == nil && !info.Mode().IsRegular() {
			err = taskfile.ErrNotRegular
		}
		if err != nil {
			c.skip(name, fmt.Sprintf("it could not be read (%v)", unwrapPath(err)))
			continue
		}
		c.files = append(c.files, File{Name: name, Path: filepath.Join(c.dir, filepath.FromSlash(name)), Size: info.Size()})
	}
}

// Open opens the file for reading the way every file a task left is opened
// (package taskfile): a regular file reached without following a link, or
// an error. A File that Collect found is opened beneath the directory it was
// collected from, by its name; any other, by its path, refusing a link there.
func (f File) Open() (*os.File, error) {
	if root, ok := strings.CutSuffix(f.Path, string(filepath.Separator)+filepath.FromSlash(f.Name)); ok && root != "" {
		return taskfile.Open(root, f.Name)
	}
	return taskfile.Open(filepath.Dir(f.Path), filepath.Base(f.Path))
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Publish copies the file at src into the artifacts directory dir under name,
// atomically: into a temporary file next to the destination, renamed into
// place once it is complete. A file of that name already there is replaced.
func Publish(dir, src, name string) error {
	if err := artifactname.Check(name); err != nil {
		return fmt.Errorf("%q cannot be an artifact's name: %v", name, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory: add the files in it one by one, or write them under %s", src, dir)
		}
		return fmt.Errorf("%s is not a regular file", src)
	}
	dest := filepath.Join(dir, filepath.FromSlash(name))
	destDir := filepath.Dir(dest)
	if err := os.MkdirAll(destDir, 0o755); err != nil {
		return err
	}
	base := path.Base(name)
	if len(base) > 64 {
		base = base[:64] // the temporary name must stay within a segment's 255 bytes
	}
	tmp, err := os.CreateTemp(destDir, TempPrefix+base+"-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if fi, serr := os.Lstat(dest); serr == nil && fi.IsDir() {
			err = fmt.Errorf("%s is a directory in the artifacts directory; choose another --name", name)
		}
	}
	if err == nil {
		// Recorded before the rename: a task killed in between leaves a
		// name without a file, which is harmless, rather than a published
		// file the globs may leave behind.
		err = recordPublished(dir, name)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// recordPublished appends name to the directory's PublishedList. One write
// of a short line to a file opened for appending lands whole, so tasks that
// publish from several processes at once do not garble it.
func recordPublished(dir, name string) error {
	// Not through a link, and not into a FIFO (O_NONBLOCK: an error, not a
	// wait, when nobody reads it) or anything else that is not a file.
	f, err := os.OpenFile(filepath.Join(dir, PublishedList), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		return fmt.Errorf("recording %s as published: %w", name, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("recording %s as published: %s is not a regular file", name, PublishedList)
	}
	// Whoever creates the list lets every user of the task append to it
	// (the umask would not); for anyone else this fails, and need not work.
	_ = f.Chmod(0o666)
	_, err = f.WriteString(name + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording %s as published: %w", name, err)
	}
	return nil
}

// Published returns the names PublishedList in dir records; none when there
// is no list. The list is the task's to write, so it is read as untrusted
// (package taskfile): a symbolic link is not followed (it could point at any
// file of the node, and the names in it decide which files are uploaded),
// anything but a regular file is refused unopened, and a list longer than
// any Publish writes is refused.
func Published(dir string) (map[string]bool, error) {
	b, err := taskfile.ReadFile(dir, PublishedList, maxPublishedListBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s could not be read: %w", PublishedList, unwrapPath(err))
	}
	names := map[string]bool{}
	for n := range strings.SplitSeq(string(b), "\n") {
		if n != "" {
			names[n] = true
		}
	}
	return names, nil
}
