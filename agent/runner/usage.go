package runner

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where a container sees its cgroup filesystem.
const cgroupRoot = "/sys/fs/cgroup"

// readUsage reads the CPU time (microseconds) and the peak memory use (bytes)
// of the container's cgroup, the runner's own, just before the runner writes
// its exit record. Either is nil when it cannot be read: unknown, never a
// made-up 0.
//
// Why the runner and not the agent: a container's cgroup lives exactly as
// long as something runs in it. With Docker's systemd cgroup driver the
// container is a transient scope that systemd removes as soon as its last
// process exits, and with the cgroupfs driver containerd's shim deletes it
// as it collects the exit; either may be before the agent even hears of the
// exit, and the agent may not be running at all when a task ends. The runner
// is PID 1, so while it reads, the cgroup is there and holds everything the
// task did (every other process of the container is dead by then, killed and
// reaped). It costs two small reads and needs no access to the host.
//
// Which directory is the container's: root is the cgroup filesystem as the
// container sees it (/sys/fs/cgroup) and self is /proc/self/cgroup. Docker
// 20.10 gives a container on cgroup v2 a private cgroup namespace, where
// self says "0::/" and root is the container's cgroup; with a host cgroup
// namespace (or on cgroup v1, where runc bind-mounts each controller's
// container directory in place) self names the container's path, which is
// used when the full hierarchy is mounted and root itself otherwise. On v2
// a directory without cgroup.type is the host's root cgroup, whose figures
// are the whole machine's: those are not the task's and read as unknown.
func readUsage(root string, self []byte) (cpuMicros, peak *int64) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		dir := cgroupDir(root, self, "")
		if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err != nil {
			return nil, nil
		}
		if v, ok := keyedValue(filepath.Join(dir, "cpu.stat"), "usage_usec"); ok {
			cpuMicros = &v
		}
		if v, ok := singleValue(filepath.Join(dir, "memory.peak")); ok {
			peak = &v
		}
		return cpuMicros, peak
	}
	// cgroup v1: one hierarchy per controller.
	if v, ok := singleValue(filepath.Join(cgroupDir(filepath.Join(root, "cpuacct"), self, "cpuacct"), "cpuacct.usage")); ok {
		v /= 1000 // nanoseconds
		cpuMicros = &v
	}
	if v, ok := singleValue(filepath.Join(cgroupDir(filepath.Join(root, "memory"), self, "memory"), "memory.max_usage_in_bytes")); ok {
		peak = &v
	}
	return cpuMicros, peak
}

// cgroupDir is the directory under mount of the cgroup self names for
// controller ("" for cgroup v2's unified hierarchy): mount joined with that
// path when it exists there, else mount itself (the container's own
// directory, mounted in place).
func cgroupDir(mount string, self []byte, controller string) string {
	for _, line := range bytes.Split(self, []byte("\n")) {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		match := controller == "" && parts[0] == "0" && parts[1] == ""
		if controller != "" {
			for _, c := range strings.Split(parts[1], ",") {
				match = match || c == controller
			}
		}
		if !match {
			continue
		}
		p := filepath.Clean("/" + parts[2])
		if p == "/" {
			return mount
		}
		if st, err := os.Stat(filepath.Join(mount, p)); err == nil && st.IsDir() {
			return filepath.Join(mount, p)
		}
		return mount
	}
	return mount
}

// maxCgroupFile bounds a read of a cgroup file: the ones read here are a
// line or a dozen.
const maxCgroupFile = 4 << 10

func readSmall(path string) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b := make([]byte, maxCgroupFile)
	n, _ := f.Read(b)
	return b[:n], n > 0
}

// singleValue reads a file that holds one non-negative number.
func singleValue(path string) (int64, bool) {
	b, ok := readSmall(path)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// keyedValue reads the number after key in a flat-keyed file ("key value"
// lines, as cpu.stat).
func keyedValue(path, key string) (int64, bool) {
	b, ok := readSmall(path)
	if !ok {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), key+" "); found {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// ownUsage is readUsage of the running container.
func ownUsage() (cpuMicros, peak *int64) {
	self, _ := os.ReadFile("/proc/self/cgroup")
	return readUsage(cgroupRoot, self)
}
