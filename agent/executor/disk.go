package executor

// How much disk a running task has filled, measured from the host, and the
// watch that stops a task over the node's workspace limit.
//
// A size limit the kernel enforces would be better: Docker's overlay2 on xfs
// mounted with pquota takes --storage-opt size for a container's writable
// layer, and an xfs project quota can bound a directory. Neither is
// available on every engine (this project's CI engine runs fuse-overlayfs on
// ext4), and neither covers a volume, so the agent measures instead, and
// the limit is checked every WorkspaceCheck rather than at every write: a
// task can overshoot it by what it writes in one interval.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ReasonWorkspaceFull starts the reason of a task stopped for filling more
// disk than the node's workspace limit.
const ReasonWorkspaceFull = "workspace full"

// ReasonNodeDiskFull starts the reason of a task stopped because the node's
// disk had no room for its output for longer than DiskFullAfter. Unlike
// "workspace full" it is the node's trouble, not the task's: the task may run
// fine on a node with room.
const ReasonNodeDiskFull = "node disk full"

// DefaultDiskFullAfter is how long a task's output may find the node's disk
// full before the task is stopped (Config.DiskFullAfter). Meanwhile the task
// is held, blocked on its next write, and loses nothing; a disk often frees
// within minutes, as other tasks end and their directories go. Without a
// bound the task would hang until its timeout, or forever.
const DefaultDiskFullAfter = 5 * time.Minute

// nodeDiskCheck is how often a running task's node disk is looked at for
// room, and nodeDiskLow the free space under which it counts as full: less
// than two of the runner's biggest records.
const (
	nodeDiskCheck = time.Second
	nodeDiskLow   = 64 << 10
)

// watchNodeDisk notes in the task's log, once, that the disk of its
// directory is full: the task's output is then held until there is room, or
// until the runner stops the task (--disk-full-after), and someone following
// the task would otherwise see only silence. The returned function stops the
// watch.
func (r *run) watchNodeDisk(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(nodeDiskCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var st unix.Statfs_t
			if unix.Statfs(r.dir, &st) != nil {
				continue
			}
			if free := int64(st.Bavail) * st.Bsize; free < nodeDiskLow {
				since := time.Now()
				r.log.Warn("the node's disk is full; the task's output waits for room", "dir", r.dir, "free_bytes", free)
				r.note("%s", pausedNote(since, r.e.diskFullAfter, free, r.e.tasksDir))
				return
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// pausedNote is the note of a task whose output found the node's disk full
// at since: it is held, and stopped after diskFullAfter unless room comes.
func pausedNote(since time.Time, diskFullAfter time.Duration, free int64, dir string) string {
	return fmt.Sprintf("paused: %s since %s; fails at %s unless space frees (%s free in %s: the task's output waits for room, "+
		"for at most podium-agent --disk-full-after %s)", ReasonNodeDiskFull, since.UTC().Format(time.RFC3339),
		since.Add(diskFullAfter).UTC().Format(time.RFC3339), sizeText(free), dir, diskFullAfter)
}

// DefaultWorkspaceCheck is how often a running task's disk use is measured
// when Limits.WorkspaceCheck does not say.
const DefaultWorkspaceCheck = 10 * time.Second

const (
	// maxScanEntries bounds the files and directories one measurement
	// visits. Measuring is a walk, so its cost grows with the number of
	// files, which the task controls: a task over this many is stopped
	// as over its limit (millions of tiny files exhaust a file system's
	// inodes as surely as one big file exhausts its blocks).
	maxScanEntries = 1 << 20
	// maxScanDepth bounds how deep a measurement descends; each level
	// holds a directory open.
	maxScanDepth = 512
	// scanShare is the most of its time the watch spends measuring: after
	// a measurement that took d, the next waits at least d*scanShare.
	scanShare = 10
)

var (
	errTooManyFiles = errors.New("too many files")
	errTooDeep      = errors.New("directories nested too deep")
)

// fileBlocks is the disk space allocated to the file at path, not following
// a link; 0 if it cannot be looked at.
func fileBlocks(path string) int64 {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// usage sums the disk space allocated to everything under each of dirs (a
// directory that does not exist counts 0). It is walked from the host, as
// root, inside directories the task writes to, so it follows no symbolic
// link, opens nothing but directories, and opens those without blocking and
// without following a link a task put in a directory's place; a file with
// several links counts once. entries counts what was visited, against
// maxScanEntries.
func usage(dirs ...string) (bytes int64, err error) {
	s := &scan{seen: map[[2]uint64]bool{}}
	for _, d := range dirs {
		if err := s.root(d); err != nil {
			return s.bytes, err
		}
	}
	return s.bytes, nil
}

type scan struct {
	bytes   int64
	entries int
	seen    map[[2]uint64]bool // device and inode of files with several links
}

func (s *scan) root(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		s.bytes += st.Blocks * 512
	}
	return s.walk(fd, 0)
}

// walk adds up what is in the directory open as fd, and closes it.
func (s *scan) walk(fd, depth int) error {
	defer unix.Close(fd)
	if depth >= maxScanDepth {
		return errTooDeep
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil // a directory that cannot be read counts as what was read
		}
		if n <= 0 {
			return nil
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			s.entries++
			if s.entries > maxScanEntries {
				return errTooManyFiles
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone since it was listed
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
				k := [2]uint64{st.Dev, st.Ino}
				if s.seen[k] {
					continue
				}
				s.seen[k] = true
			}
			s.bytes += st.Blocks * 512
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			// O_NOFOLLOW and O_DIRECTORY: if the task swapped the directory
			// for a link or a FIFO since the stat, the open fails instead of
			// leaving the walk or blocking it.
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			if err := s.walk(sub, depth+1); err != nil {
				return err
			}
		}
	}
}

// diskWatch measures a running task's disk use every interval and says, once,
// when it is over the limit.
type diskWatch struct {
	// C receives the reason the task must stop, once.
	C      <-chan string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *diskWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
}

// watchDisk starts watching the disk the task's container id fills: its
// workspace volume's directory, its artifacts directory and inbox on the
// host, and the container's writable layer as the engine sizes it. With no
// workspace limit it watches nothing (nil, whose C never fires).
func (r *run) watchDisk(ctx context.Context, id string) *diskWatch {
	limit := r.e.limits.WorkspaceBytes
	if limit <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	c := make(chan string, 1)
	w := &diskWatch{C: c, cancel: cancel}
	// The runner logs count too: they are bind-mounted writable into the
	// containers (the runner writes them as the task's user), so a task
	// could write to one directly, past the runner's output limit, and
	// fill the host's disk with what the agent would never read.
	dirs := []string{filepath.Join(r.dir, volumeDir), filepath.Join(r.dir, artifactsDir), filepath.Join(r.dir, inboxDir),
		filepath.Join(r.dir, sidecarsDir)}
	runnerLog := filepath.Join(r.dir, logFile)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		wait := r.e.limits.WorkspaceCheck
		warned := false
		for {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			began := time.Now()
			used, err := usage(dirs...)
			used += fileBlocks(runnerLog)
			layer := r.layerSize(ctx, id)
			took := time.Since(began)
			wait = max(r.e.limits.WorkspaceCheck, took*scanShare)
			switch {
			case errors.Is(err, errTooManyFiles):
				c <- fmt.Sprintf("%s: the task made more than %d files and directories in its workspace, artifacts and inbox, "+
					"more than this node measures for one task; make fewer, larger files", ReasonWorkspaceFull, maxScanEntries)
				return
			case errors.Is(err, errTooDeep):
				c <- fmt.Sprintf("%s: the task nested directories more than %d deep in its workspace, artifacts and inbox, "+
					"deeper than this node measures for one task", ReasonWorkspaceFull, maxScanDepth)
				return
			case err != nil && !warned:
				warned = true
				r.log.Warn("cannot measure the task's disk use; its workspace limit is checked on what can be read", "err", err)
			}
			if total := used + layer; total > limit {
				c <- fmt.Sprintf("%s: the task filled %s of disk (its workspace, artifacts, inbox, runner logs and its container's own files), "+
					"more than this node's limit of %s for one task (podium-agent --workspace-limit); write less, "+
					"or clean up as the task goes", ReasonWorkspaceFull, sizeText(total), sizeText(limit))
				return
			}
		}
	}()
	return w
}

// layerSize is how much the container has written outside its volumes, as
// the engine sizes its writable layer; 0 when it cannot say.
func (r *run) layerSize(ctx context.Context, id string) int64 {
	ictx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	info, _, err := r.e.docker.ContainerInspectWithRaw(ictx, id, true)
	if err != nil || info.SizeRw == nil {
		return 0
	}
	return *info.SizeRw
}

// sizeText writes a byte count for a person: "10 GiB", "1.5 GiB", "300 MiB".
func sizeText(b int64) string {
	switch {
	case b >= 1<<30:
		return trimZero(fmt.Sprintf("%.1f", float64(b)/(1<<30))) + " GiB"
	case b >= 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(b)/(1<<20))) + " MiB"
	case b >= 1<<10:
		return trimZero(fmt.Sprintf("%.1f", float64(b)/(1<<10))) + " KiB"
	}
	return fmt.Sprintf("%d bytes", b)
}

func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}
