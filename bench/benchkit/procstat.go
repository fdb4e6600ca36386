package benchkit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It is
// 100 on every Linux architecture this benchmark runs on; reading it properly
// needs sysconf, which needs cgo.
const clockTick = 100

// ProcStat returns the parent pid and utime+stime of a process. The command
// name in field 2 may contain spaces and parentheses, so fields are counted
// from the last ')'.
func ProcStat(pid int) (ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, time.Duration(ut+st) * time.Second / clockTick, nil
}

// ProcCPU is a process's user+system CPU time so far.
func ProcCPU(pid int) (time.Duration, error) {
	_, cpu, err := ProcStat(pid)
	return cpu, err
}

type MemInfo struct{ RSSKiB, HWMKiB int64 }

// ProcMem reads VmRSS (resident now) and VmHWM (the peak resident size since
// the process started) from /proc/<pid>/status.
func ProcMem(pid int) (MemInfo, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return MemInfo{}, err
	}
	defer f.Close()
	var m MemInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			m.RSSKiB = n
		case "VmHWM":
			m.HWMKiB = n
		}
	}
	return m, sc.Err()
}

// ProcFDs counts a process's open file descriptors: with HTTP/2 the fleet
// should cost the coordinator about one socket per N/200 nodes, not one each.
func ProcFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// postmasterPID reads the server's pid from the first line of postmaster.pid.
func PostmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("find the Postgres server's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// CPUByPID is a snapshot of CPU time per process.
type CPUByPID map[int]time.Duration

// treeCPU snapshots the postmaster and its direct children (every backend and
// background process is one). Postgres work is a separate process per
// connection, so the coordinator's queries cost CPU there, not in its own pid.
func TreeCPU(root int) CPUByPID {
	out := CPUByPID{}
	if _, cpu, err := ProcStat(root); err == nil {
		out[root] = cpu
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		ppid, cpu, err := ProcStat(pid)
		if err == nil && ppid == root {
			out[pid] = cpu
		}
	}
	return out
}

// since is the CPU the processes used after an earlier snapshot; a process
// that started in between counts from zero, one that ended is lost (backends
// live as long as their pooled connection, so that is rare).
func (now CPUByPID) Since(before CPUByPID) time.Duration {
	var d time.Duration
	for pid, cpu := range now {
		d += cpu - before[pid]
	}
	return d
}
