package e2e

import (
	"regexp"
	"strconv"
	"testing"
)

// busyScript holds about 100 MB (busybox dd reads its whole block of 100 MiB
// from /dev/zero into one buffer) and then burns a CPU-second: the shell
// spins until its own CPU time, in /proc's clock ticks of 1/100 s, reaches
// 100. The loop reads /proc with the shell's builtin read, so the time is
// the shell's own and no child's. What it does is fixed, however fast the
// machine.
const busyScript = `dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null
while read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$$/stat && [ $((u + s)) -lt 100 ]; do :; done
echo done`

// A real task that burns about one CPU-second and holds about 100 MB reports
// figures in range of what it did, read from its container's cgroup on this
// machine's engine, and `podium task get` shows them. The ranges are of the
// work, not of time: CPU 0.5 to 3 s for one second of spinning plus a
// shell's start, a peak of 90 to 400 MiB for a 100 MiB buffer, a wall time
// no shorter than the CPU time of one thread, the 5 bytes it printed and no
// artifacts.
func TestUsageOfABusyTaskIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.podium("run", "--image", e.image, "--", "sh", "-c", busyScript)
	if r.code != 0 || string(r.stdout) != "done\n" {
		t.Fatalf("podium run: exit %d, stdout %q, want 0 and done\n%s", r.code, r.stdout, r.stderr)
	}
	id := r.taskID(t)

	u := e.task(id).GetUsage()
	if u == nil || u.CpuSeconds == nil || u.PeakMemoryBytes == nil || u.WallSeconds == nil {
		t.Fatalf("usage %v; want cpu, peak memory and wall time all measured", u)
	}
	const mib = 1 << 20
	if c := u.GetCpuSeconds(); c < 0.5 || c > 3 {
		t.Errorf("cpu %.3f s for a task that spun for one CPU-second; want 0.5 to 3 s", c)
	}
	if p := u.GetPeakMemoryBytes(); p < 90*mib || p >= 400*mib {
		t.Errorf("peak memory %.1f MiB for a task that held a 100 MiB buffer; want 90 to 400 MiB", float64(p)/mib)
	}
	if w := u.GetWallSeconds(); w < 0.9*u.GetCpuSeconds() {
		t.Errorf("wall %.3f s is shorter than the %.3f s of CPU one thread used", w, u.GetCpuSeconds())
	}
	if u.GetOutputBytes() != 5 || u.GetArtifactBytes() != 0 {
		t.Errorf("output %d B and artifacts %d B; want the 5 bytes of \"done\\n\" and none", u.GetOutputBytes(), u.GetArtifactBytes())
	}

	get := e.podium("task", "get", id)
	line := regexp.MustCompile(`(?m)^usage: +cpu ([0-9.]+) s, peak memory ([0-9]+) MiB, wall ([^,]+), output 5 B, artifacts 0 B$`)
	m := line.FindSubmatch(get.stdout)
	if get.code != 0 || m == nil {
		t.Fatalf("podium task get: exit %d, want a usage line matching %s in:\n%s%s", get.code, line, get.stdout, get.stderr)
	}
	t.Logf("podium task get shows: %s", m[0])
	if c, _ := strconv.ParseFloat(string(m[1]), 64); c < 0.5 || c > 3 {
		t.Errorf("podium task get shows cpu %s s; want 0.5 to 3", m[1])
	}
	if p, _ := strconv.Atoi(string(m[2])); p < 90 || p >= 400 {
		t.Errorf("podium task get shows peak memory %s MiB; want 90 to 400", m[2])
	}
}
