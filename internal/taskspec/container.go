package taskspec

// Container options: read_only, shm_size, ulimits and tmpfs on the task's
// container, and what a sidecar may ask beyond an ordinary one (privileged,
// share_workspace). The agent applies them to the container's HostConfig;
// every bound is here so that the CLI, the coordinator and the agent agree.

import (
	"fmt"
	"path"
	"slices"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

const (
	// DefaultTmpfsBytes is the size of a tmpfs whose spec gives none, and
	// of the /tmp a read-only task gets unless its tmpfs names /tmp. A
	// tmpfs mounted with no size is bounded by nothing but half the
	// node's memory; 64 MiB is Docker's own /dev/shm default.
	DefaultTmpfsBytes = 64 << 20
	// MinMountBytes is the smallest shm_size or tmpfs size accepted: one
	// page. Less is always a unit left out ("shm_size: 64" for 64 MiB),
	// and would give the task a /dev/shm nothing fits in.
	MinMountBytes = 4 << 10
	// MaxMountBytes bounds shm_size and each tmpfs: 1 TiB. Their pages
	// are memory charged to the task's memory limit, so a larger one can
	// never be filled on any machine Podium runs on; past it the number
	// is a mistake.
	MaxMountBytes = 1 << 40
	// MaxTmpfs bounds the tmpfs list.
	MaxTmpfs = 16
	// Unlimited is a ulimit's "no limit" (RLIM_INFINITY), written
	// "unlimited" in a spec file.
	Unlimited = -1
)

// UlimitRule is what a spec may set one ulimit to.
type UlimitRule struct {
	// Max is the largest finite soft or hard value.
	Max int64
	// Unlimited says whether the limit may be "unlimited".
	Unlimited bool
	// Unit names what the number counts, for errors.
	Unit string
}

// AllowedUlimits are the ulimits a spec may set, with their bounds. Left out
// on purpose: rtprio, nice and rttime, which would let a task's processes
// raise their own scheduling priority over every other task on the node,
// and rss and as, which Linux ignores or Docker does not take. nofile has
// no "unlimited" (the kernel refuses more than fs.nr_open, 1048576 by
// default). nproc counts the processes of the task's user across the whole
// node, not within the task: resources.pids is the task's own bound.
var AllowedUlimits = map[string]UlimitRule{
	"core":       {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
	"cpu":        {Max: MaxDurationSeconds, Unlimited: true, Unit: "seconds"},
	"data":       {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
	"fsize":      {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
	"locks":      {Max: 1 << 22, Unlimited: true, Unit: "locks"},
	"memlock":    {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
	"msgqueue":   {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
	"nofile":     {Max: 1 << 20, Unit: "open files"},
	"nproc":      {Max: MaxPids, Unlimited: true, Unit: "processes"},
	"sigpending": {Max: 1 << 22, Unlimited: true, Unit: "signals"},
	"stack":      {Max: 1 << 50, Unlimited: true, Unit: "bytes"},
}

// UlimitNames is AllowedUlimits' names, sorted, for messages.
func UlimitNames() []string {
	names := make([]string, 0, len(AllowedUlimits))
	for n := range AllowedUlimits {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ReservedPaths are the directories of a task's container that are Podium's
// own: the runner and its log (/podium), the workspace, the inbox
// (/run/podium) and file secrets (/run/secrets). A tmpfs may be mounted
// neither at, under nor over one of them: it would hide what the agent
// mounts there, or be hidden by it. The agent's tests check that every
// mount it makes lies under one of these.
var ReservedPaths = []string{"/podium", "/workspace", "/run/podium", "/run/secrets"}

// enginePaths are the container engine's own file systems: a tmpfs at or
// under one would replace what the kernel or the engine puts there.
var enginePaths = []string{"/proc", "/sys", "/dev"}

// within reports whether p is dir or lies under it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// TmpfsPathProblem says what is wrong with a path a tmpfs is to be mounted
// at, or "" when nothing is.
func TmpfsPathProblem(p string) string {
	switch {
	case p == "":
		return "required: give the absolute path to mount the tmpfs at, e.g. /cache"
	case len(p) > MaxWorkingDirBytes:
		return fmt.Sprintf("is %d bytes, longer than any path can be (%d)", len(p), MaxWorkingDirBytes)
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%s is relative: give an absolute path, e.g. /cache", clip(p))
	case strings.ContainsAny(p, ":,") || strings.IndexFunc(p, isSpaceOrControl) >= 0:
		return fmt.Sprintf("%s contains a space, control character, ':' or ',': give a plain path, e.g. /cache", clip(p))
	case path.Clean(p) != p:
		return fmt.Sprintf("%s is not a clean path: write it as %s", clip(p), path.Clean(p))
	case p == "/":
		return "is the root directory: mount the tmpfs at a directory inside the container, e.g. /cache (read_only: true keeps / from being written)"
	case p == "/dev/shm":
		return "is the engine's shared memory mount: set its size with shm_size instead"
	}
	for _, r := range ReservedPaths {
		if within(p, r) || within(r, p) {
			return fmt.Sprintf("%s is over %s, which Podium mounts into every task itself: choose another directory", clip(p), r)
		}
	}
	for _, e := range enginePaths {
		if within(p, e) {
			return fmt.Sprintf("%s is under %s, which the container engine provides: choose another directory", clip(p), e)
		}
	}
	return ""
}

// checkMountSize bounds shm_size or a tmpfs size; 0 means the default.
func checkMountSize(field string, n int64, zero string) error {
	switch {
	case n < 0:
		return fieldErr(field, "%d is negative: give 0 (%s) or a size such as 256MiB", n, zero)
	case n > 0 && n < MinMountBytes:
		return fieldErr(field, "%d bytes is less than a page (%d): did you leave out the unit? Write e.g. %dMiB", n, MinMountBytes, n)
	case n > MaxMountBytes:
		return fieldErr(field, "%s is more than %s: its pages count against the task's memory, so give at most what the task will use",
			FormatSize(n), FormatSize(MaxMountBytes))
	}
	return nil
}

// checkUlimit checks one ulimit; seen maps the names before it to their
// index.
func checkUlimit(field string, u *podiumv1.Ulimit, i int, seen map[string]int) error {
	if u == nil {
		return fieldErr(field, "empty: a ulimit needs a name and a value")
	}
	name := u.GetName()
	rule, ok := AllowedUlimits[name]
	if !ok {
		if name == "" {
			return fieldErr(field+".name", "required: name the limit, one of %s", strings.Join(UlimitNames(), ", "))
		}
		return fieldErr(field+".name", "%s may not be set: a task may set %s", clip(name), strings.Join(UlimitNames(), ", "))
	}
	if j, dup := seen[name]; dup {
		return fieldErr(field+".name", "%q is already set by spec.ulimits[%d]: give each limit once", name, j)
	}
	seen[name] = i
	for _, v := range []struct {
		what string
		n    int64
	}{{"soft", u.GetSoft()}, {"hard", u.GetHard()}} {
		switch {
		case v.n == Unlimited && !rule.Unlimited:
			return fieldErr(field+"."+v.what, "%s cannot be unlimited: give a number of %s, at most %d", name, rule.Unit, rule.Max)
		case v.n < Unlimited:
			return fieldErr(field+"."+v.what, "%d is negative: give a number of %s or unlimited (-1)", v.n, rule.Unit)
		case v.n > rule.Max:
			return fieldErr(field+"."+v.what, "%d is more than the %d %s %s may be set to", v.n, rule.Max, rule.Unit, name)
		}
	}
	soft, hard := u.GetSoft(), u.GetHard()
	if hard != Unlimited && (soft == Unlimited || soft > hard) {
		return fieldErr(field+".hard", "%s's hard limit (%s) is below its soft limit (%s): the hard limit is the most the soft may be raised to, "+
			"so give a hard limit at least as high", name, ulimitText(hard), ulimitText(soft))
	}
	return nil
}

func ulimitText(n int64) string {
	if n == Unlimited {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// CheckContainerOptions checks read_only's companions: shm_size, ulimits and
// tmpfs (read_only itself is a switch), returning a *FieldError for the
// first out of its bounds. Validate calls it; the agent calls it again on
// every assignment, whatever the coordinator let through.
func CheckContainerOptions(spec *podiumv1.TaskSpec) error {
	if err := checkMountSize("spec.shm_size_bytes", spec.GetShmSizeBytes(), "the engine's default of 64 MiB"); err != nil {
		return err
	}
	if n := len(spec.GetUlimits()); n > len(AllowedUlimits) {
		return fieldErr("spec.ulimits", "has %d limits, more than the %d names there are: give each limit once", n, len(AllowedUlimits))
	}
	seen := map[string]int{}
	for i, u := range spec.GetUlimits() {
		if err := checkUlimit(fmt.Sprintf("spec.ulimits[%d]", i), u, i, seen); err != nil {
			return err
		}
	}
	if n := len(spec.GetTmpfs()); n > MaxTmpfs {
		return fieldErr("spec.tmpfs", "has %d mounts, more than %d: mount one tmpfs and make directories in it", n, MaxTmpfs)
	}
	for i, m := range spec.GetTmpfs() {
		field := fmt.Sprintf("spec.tmpfs[%d]", i)
		if m == nil {
			return fieldErr(field, "empty: a tmpfs needs at least a path")
		}
		if problem := TmpfsPathProblem(m.GetPath()); problem != "" {
			return fieldErr(field+".path", "%s", problem)
		}
		for j, o := range spec.GetTmpfs()[:i] {
			if p := o.GetPath(); within(m.GetPath(), p) || within(p, m.GetPath()) {
				return fieldErr(field+".path", "%q is at or within %q of spec.tmpfs[%d] (or holds it): mount each directory once", m.GetPath(), p, j)
			}
		}
		if err := checkMountSize(field+".size_bytes", m.GetSizeBytes(), "64 MiB"); err != nil {
			return err
		}
	}
	return nil
}

// HasPrivilegedSidecar reports whether any of spec's sidecars asks to be
// privileged: such a task goes only to a node that allows it.
func HasPrivilegedSidecar(spec *podiumv1.TaskSpec) bool {
	for _, sc := range spec.GetSidecars() {
		if sc.GetPrivileged() {
			return true
		}
	}
	return false
}
