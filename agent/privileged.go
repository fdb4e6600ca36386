package agent

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// capNames are the Linux capabilities by number (capabilities(7)), for a
// message an operator reads.
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
	"LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
	"CHECKPOINT_RESTORE",
}

var capBndRE = regexp.MustCompile(`(?m)^CapBnd:\s*([0-9a-f]+)$`)

// missingCapabilities names the capabilities the kernel has (0 through
// lastCap) that the bounding set in status (a /proc/<pid>/status text)
// lacks.
func missingCapabilities(status string, lastCap int) ([]string, error) {
	m := capBndRE.FindStringSubmatch(status)
	if m == nil {
		return nil, fmt.Errorf("no CapBnd line")
	}
	bnd, err := strconv.ParseUint(m[1], 16, 64)
	if err != nil {
		return nil, err
	}
	var missing []string
	for c := 0; c <= lastCap && c < 64; c++ {
		if bnd&(1<<c) != 0 {
			continue
		}
		name := fmt.Sprintf("capability %d", c)
		if c < len(capNames) {
			name = "CAP_" + capNames[c]
		}
		missing = append(missing, name)
	}
	return missing, nil
}

// warnIfPrivilegedCannotRun warns, when the agent is to run privileged
// sidecars, that the machine cannot: a privileged container asks for every
// capability the kernel has, and runc refuses to start one when the engine
// (which the agent shares a machine with) lacks any of them in its
// bounding set, as it does when it runs inside a restricted container.
// Every task with a privileged sidecar would fail here; the warning at
// start says so before the first one does. It only warns: a newer engine
// may grant what it can, and the flag is the operator's.
func warnIfPrivilegedCannotRun(log *slog.Logger) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return
	}
	lastCap, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		return
	}
	missing, err := missingCapabilities(string(status), lastCap)
	if err != nil || len(missing) == 0 {
		return
	}
	log.Warn("--allow-privileged-sidecars is set, but this machine's capability bounding set lacks "+strings.Join(missing, ", ")+
		": a Docker engine here cannot start privileged containers (is it inside a restricted container?), "+
		"and tasks with privileged sidecars will fail on this node; check with `docker run --rm --privileged IMAGE true`",
		"missing", missing)
}
