// Package taskfile is how the agent, which runs as root, touches files in a
// directory a task can write: the task's inbox, its artifacts directory, the
// runner logs its runner appends to. Whatever the task leaves there is
// hostile until proved otherwise.
//
// A task that can write a directory can put anything under a name the agent
// is about to open: a symbolic link to the node's identity file (whose key
// would then be read, and quoted in an error, by the agent), a FIFO (an open
// or a read that never returns, holding up whatever called it), a device node
// (a task with CAP_MKNOD may make one; the Docker device cgroup limits the
// container, not the agent, and opening some devices has effects of its own),
// a directory, or a file of a hundred gigabytes. So every name is:
//
//   - resolved beneath the directory without following any symbolic link at
//     any component (openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where
//     the kernel has it, Linux 5.6 and later; elsewhere one openat with
//     O_NOFOLLOW per component), and refused when it names a link;
//   - opened first as an O_PATH descriptor, which opens nothing (no device's
//     open handler runs, no FIFO waits for a writer), checked with fstat to be
//     a regular file, and only then reopened for reading through
//     /proc/self/fd, which reaches that very inode and no other; without
//     /proc it is opened again with O_NOFOLLOW|O_NONBLOCK|O_NOCTTY and must be
//     the same inode;
//   - read with a bound (ReadFile), refused when larger, and never quoted:
//     the errors here name the file and what is wrong with it, never what it
//     holds, so a caller that logs them leaks nothing.
//
// Writes go to a fresh temporary name created with O_CREAT|O_EXCL|O_NOFOLLOW
// and are renamed over the target within the directory (renameat replaces a
// link planted there, it never writes through one).
//
// The directory itself (the path given to OpenDir) is the agent's: it must
// be one the task cannot replace, such as a bind mount's source, whose parent
// only the agent writes. Only its last component is refused as a link.
//
// Errors are *fs.PathError; what callers branch on is ErrSymlink,
// ErrNotRegular, ErrTooLarge, ErrName, and fs.ErrNotExist.
//
// # Where the agent touches what a task writes
//
// The audit this package came out of (issue 13, item 6). A task writes three
// kinds of host path: the directories bind-mounted into its container (the
// inbox and the artifacts directory, both mode 0777), and the runner logs,
// files bind-mounted into each container whose names it cannot change but
// whose contents it can. The attempt's directory around them, the tasks
// directory and the workspace volume's host path are not the task's. Every
// touch of the first kind, and how it is made:
//
//	inbox/.lock               written fresh by inbox.Prepare (WriteFile) before
//	                          the container starts; the reader in the task opens
//	                          it with O_NOFOLLOW
//	inbox/.cursor             read by inbox.Deliver (agent, as root) and Take (the
//	                          task's own reader) with Dir.ReadFile, at most 64
//	                          bytes, never quoted; written by Take with WriteFile
//	inbox/<id>.msg            Dir.Lstat to spot a repeat (a regular file only),
//	                          written with WriteFile; Take reads it with ReadFile
//	                          (at most 1 MiB) and lists the directory with ReadDir
//	artifacts/ (the walk)     artifacts.CollectWhere: Dir.ReadDir per directory,
//	                          beneath the root, no link followed; sizes from
//	                          Dir.Lstat; links, FIFOs, sockets, devices skipped
//	                          with a note, never opened
//	artifacts/<name> uploads  artifacts.File.Open: Dir.Open beneath the directory
//	                          it was collected from (also for uploads an agent
//	                          resumes from uploads.json)
//	artifacts/.podium-published
//	                          artifacts.Published: ReadFile with a bound; Publish
//	                          (in the task) appends with O_NOFOLLOW|O_NONBLOCK
//	                          and checks it is a regular file
//	output.log, sidecars/<name>.log
//	                          executor's follow, lastLines and findExit: Open
//	                          (their paths are the agent's; the open refuses
//	                          anything but a regular file all the same)
//	the attempt's directory   os.RemoveAll at teardown and by RemoveOrphans,
//	                          which unlinks relative to directory descriptors
//	                          opened with O_NOFOLLOW and so never follows a link
//	                          the task left inside
//
// The workspace volume is reached only through the engine
// (CopyFromContainer), as a tar stream whose names, types and links the
// executor checks before it writes anything, into a directory of the
// attempt's that no container mounts (executor/workspace.go). And the
// session delivers inbox messages off its receive loop, each waited for at
// most a bounded time (session.Config.InjectTimeout), so that even a stuck
// delivery cannot hold up the node's acks, cancels and assignments.
package taskfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var (
	// ErrSymlink is a name that is, or passes through, a symbolic link.
	ErrSymlink = errors.New("is a symbolic link, which the agent does not follow in a directory a task can write")
	// ErrNotRegular is a name that is not a regular file: a FIFO, socket,
	// device or directory.
	ErrNotRegular = errors.New("is not a regular file")
	// ErrTooLarge is a file larger than the caller's bound.
	ErrTooLarge = errors.New("is larger than the agent reads")
	// ErrName is a name that could leave the directory or is not a name:
	// absolute, empty, or with "." or ".." components.
	ErrName = errors.New("is not a plain name relative to the directory")
)

// haveOpenat2 turns false the first time the kernel says it has no openat2
// (ENOSYS); from then on names are resolved one component at a time.
var haveOpenat2 atomic.Bool

func init() { haveOpenat2.Store(true) }

// Dir is a directory a task can write, held open so that every name is
// resolved in the same directory however its path changes meanwhile. It is
// safe for concurrent use; Close it when done.
type Dir struct {
	fd   int
	path string
	// walk and noProc force the fallbacks, for the package's tests.
	walk, noProc bool
}

// OpenDir opens the directory at path, which must not itself be a
// symbolic link (see the package doc for what the path must be).
func OpenDir(path string) (*Dir, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: mapErr(err)}
	}
	return &Dir{fd: fd, path: path}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Path is the directory's path, as given to OpenDir.
func (d *Dir) Path() string { return d.path }

// checkName accepts "/"-separated relative names whose components are all
// plain names.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return ErrName
	}
	for c := range strings.SplitSeq(name, "/") {
		if c == "" || c == "." || c == ".." {
			return ErrName
		}
	}
	return nil
}

func (d *Dir) pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: filepath.Join(d.path, filepath.FromSlash(name)), Err: err}
}

// mapErr turns what the kernel says about a link into ErrSymlink: ELOOP from
// O_NOFOLLOW or RESOLVE_NO_SYMLINKS, EXDEV from RESOLVE_BENEATH.
func mapErr(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return ErrSymlink
	case errors.Is(err, unix.EXDEV):
		return ErrName
	}
	return err
}

// retry repeats a call the kernel interrupted, or (openat2 with
// RESOLVE_BENEATH) one a concurrent rename made it unsure of.
func retry(call func() (int, error)) (int, error) {
	for i := 0; ; i++ {
		fd, err := call()
		if (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && i < 16 {
			continue
		}
		return fd, err
	}
}

// resolve opens name beneath d with flags, following no symbolic link on the
// way. O_NOFOLLOW and O_CLOEXEC are always added: with O_PATH a trailing link
// then yields a descriptor of the link itself, which the caller's fstat
// refuses.
func (d *Dir) resolve(name string, flags int) (int, error) {
	if err := checkName(name); err != nil {
		return -1, err
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !d.walk && haveOpenat2.Load() {
		how := &unix.OpenHow{Flags: uint64(flags),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		fd, err := retry(func() (int, error) { return unix.Openat2(d.fd, name, how) })
		switch {
		case errors.Is(err, unix.ENOSYS):
			haveOpenat2.Store(false)
		case errors.Is(err, unix.EPERM):
			// A seccomp filter that predates openat2 may answer EPERM for
			// it; one walk settles whether that was the real answer.
		default:
			return fd, mapErr(err)
		}
	}
	return d.walkTo(name, flags)
}

// walkTo is resolve without openat2: each directory on the way is opened
// with O_NOFOLLOW relative to the one before, so no component can be a link.
func (d *Dir) walkTo(name string, flags int) (int, error) {
	parts := strings.Split(name, "/")
	at := d.fd
	defer func() {
		if at != d.fd {
			_ = unix.Close(at)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		fd, err := retry(func() (int, error) {
			return unix.Openat(at, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		if errors.Is(err, unix.ENOTDIR) {
			// O_DIRECTORY on a link is ENOTDIR; say which it was.
			var st unix.Stat_t
			if unix.Fstatat(at, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		if err != nil {
			return -1, mapErr(err)
		}
		if at != d.fd {
			_ = unix.Close(at)
		}
		at = fd
	}
	last := parts[len(parts)-1]
	fd, err := retry(func() (int, error) { return unix.Openat(at, last, flags, 0) })
	return fd, mapErr(err)
}

// kind describes a file type for an error.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "mode " + strconv.FormatUint(uint64(mode), 8)
}

// checkRegular is nil for a regular file, else why it is not one.
func checkRegular(st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		return ErrSymlink
	}
	return fmt.Errorf("%w (%s)", ErrNotRegular, kind(st.Mode))
}

// Open opens the regular file name ("/"-separated, relative to d) for
// reading. Anything else under that name, or a link anywhere on the way to
// it, is an error, and is not opened.
func (d *Dir) Open(name string) (*os.File, error) {
	pfd, err := d.resolve(name, unix.O_PATH)
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, d.pathErr("open", name, err)
	}
	if err := checkRegular(&st); err != nil {
		return nil, d.pathErr("open", name, err)
	}
	const rd = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	fd := -1
	if !d.noProc {
		fd, err = retry(func() (int, error) { return unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), rd, 0) })
	}
	if d.noProc || err != nil {
		// No /proc (a chroot, a locked-down mount namespace): open the
		// name again and make sure it is still the file checked above. A
		// task racing a device node in between gets it opened, and refused
		// at once.
		fd, err = d.resolve(name, rd)
	}
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil || again.Dev != st.Dev || again.Ino != st.Ino {
		_ = unix.Close(fd)
		if err == nil {
			err = errors.New("was replaced while it was being opened")
		}
		return nil, d.pathErr("open", name, err)
	}
	// A regular file never blocks; the flag was for the open.
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, d.pathErr("open", name, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, filepath.FromSlash(name))), nil
}

// ReadFile reads the regular file name whole, refusing it (ErrTooLarge)
// when it holds more than limit bytes.
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, d.pathErr("read", name, fmt.Errorf("%w (%d bytes; at most %d)", ErrTooLarge, st.Size(), limit))
	}
	// The file may grow while it is read: the bound holds regardless.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, d.pathErr("read", name, unwrap(err))
	}
	if int64(len(b)) > limit {
		return nil, d.pathErr("read", name, fmt.Errorf("%w (at most %d bytes)", ErrTooLarge, limit))
	}
	return b, nil
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Lstat describes name without following it, or anything on the way to it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	pfd, err := d.resolve(name, unix.O_PATH)
	if err != nil {
		return nil, d.pathErr("lstat", name, err)
	}
	f := os.NewFile(uintptr(pfd), filepath.Join(d.path, filepath.FromSlash(name)))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, d.pathErr("lstat", name, unwrap(err))
	}
	return st, nil
}

// ReadDir lists the directory name ("." for d itself), sorted by name,
// without following a link to it. The entries' types are what the directory
// says (on a file system that does not record them, package os looks them up
// by path, without following the entry itself); to size an entry, Lstat its
// name rather than calling Info, which would look it up by path.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	var fd int
	var err error
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NONBLOCK
	if name == "." {
		fd, err = retry(func() (int, error) { return unix.Openat(d.fd, ".", flags|unix.O_CLOEXEC, 0) })
	} else {
		fd, err = d.resolve(name, flags)
	}
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, filepath.FromSlash(name)))
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// WriteFile puts data in the directory under name, a single component,
// with mode perm: into a temporary file made for it, renamed over name once
// written, so a reader never sees half of it and a link, FIFO or file the
// task left under name is replaced rather than written through.
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if err := checkName(name); err != nil || strings.Contains(name, "/") {
		return d.pathErr("write", name, ErrName)
	}
	var tmp string
	var f *os.File
	for try := 0; ; try++ {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		tmp = ".taskfile-" + hex.EncodeToString(rnd[:])
		fd, err := retry(func() (int, error) {
			return unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		})
		if errors.Is(err, unix.EEXIST) && try < 8 {
			continue // the task guessed, or planted, that name
		}
		if err != nil {
			return d.pathErr("write", name, mapErr(err))
		}
		f = os.NewFile(uintptr(fd), filepath.Join(d.path, tmp))
		break
	}
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(d.fd, tmp, d.fd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return d.pathErr("write", name, unwrap(err))
	}
	return nil
}

// Open is OpenDir(dir) and Dir.Open(name), for a single file.
func Open(dir, name string) (*os.File, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Open(name)
}

// ReadFile is OpenDir(dir) and Dir.ReadFile(name, limit), for a single file.
func ReadFile(dir, name string, limit int64) ([]byte, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadFile(name, limit)
}
