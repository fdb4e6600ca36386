package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/runlog"
)

func i64(v int64) *int64 { return &v }

// What the runner's exit record says is the task's to write: a figure past
// what the container's limits allow is cut to the bound, and one that cannot
// be a measurement is unknown; each says why. Honest figures pass as they are.
func TestBoundUsageCutsWhatTheTaskCouldNotHaveUsed(t *testing.T) {
	facts := usageFacts{wall: 2 * time.Second, cpus: 1, memory: 256 << 20}

	u, problems := boundUsage(&runlog.Exit{CPUMicros: i64(1_020_000), PeakMemory: i64(104 << 20)}, facts)
	if len(problems) != 0 || u.GetCpuSeconds() != 1.02 || u.GetPeakMemoryBytes() != 104<<20 || u.GetWallSeconds() != 2 {
		t.Fatalf("honest figures: usage %v, problems %q; want them unchanged", u, problems)
	}

	u, problems = boundUsage(&runlog.Exit{CPUMicros: i64(3600_000_000), PeakMemory: i64(1 << 40)}, facts)
	wantCPU := 2*1*cpuSlackFactor + cpuSlackSeconds
	if u.GetCpuSeconds() != wantCPU || u.GetPeakMemoryBytes() != 256<<20 {
		t.Fatalf("an hour of CPU in 2 s on 1 CPU and 1 TiB under a 256 MiB limit: usage %v; want cpu %.3f s and the limit", u, wantCPU)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], "more than 2.000 s of wall time on 1 CPUs allow") ||
		!strings.Contains(problems[1], "more than the container's limit of 268435456 B") {
		t.Fatalf("problems %q; want one for the CPU time and one for the memory, saying the bound", problems)
	}

	u, problems = boundUsage(&runlog.Exit{CPUMicros: i64(-5), PeakMemory: i64(-1)}, facts)
	if u.CpuSeconds != nil || u.PeakMemoryBytes != nil || len(problems) != 2 || !strings.Contains(problems[0], "negative") {
		t.Fatalf("negative figures: usage %v, problems %q; want both unknown, each with a reason", u, problems)
	}

	// No exit record (the runner was killed after the grace period): only
	// the engine's wall time is known.
	u, problems = boundUsage(nil, facts)
	if u.CpuSeconds != nil || u.PeakMemoryBytes != nil || u.GetWallSeconds() != 2 || len(problems) != 0 {
		t.Fatalf("no exit record: usage %v, problems %q; want only the wall time", u, problems)
	}

	// Nothing known of the container: the record's figures stand unbounded
	// rather than be made up, and the wall time is unknown.
	u, _ = boundUsage(&runlog.Exit{CPUMicros: i64(10)}, usageFacts{})
	if u.GetCpuSeconds() != 10e-6 || u.WallSeconds != nil || u.PeakMemoryBytes != nil {
		t.Fatalf("no facts: usage %v; want cpu 10 µs, wall and peak unknown", u)
	}
}

// What the engine's stats saw the running container use is a floor the task
// cannot lower: an exit record that says less is raised to it (and says so),
// and a record that says nothing takes it instead of unknown.
func TestBoundUsageRaisesWhatTheEngineSaw(t *testing.T) {
	facts := usageFacts{wall: 10 * time.Second, cpus: 2, memory: 1 << 30,
		seen: usageSeen{cpu: 3 * time.Second, memory: 200 << 20}}

	u, problems := boundUsage(&runlog.Exit{CPUMicros: i64(1), PeakMemory: i64(1)}, facts)
	if u.GetCpuSeconds() != 3 || u.GetPeakMemoryBytes() != 200<<20 || len(problems) != 2 ||
		!strings.Contains(problems[0], "less than the 3.000 s the engine measured while the task ran") {
		t.Fatalf("understated figures: usage %v, problems %q; want the engine's 3 s and 200 MiB, each with a reason", u, problems)
	}
	u, problems = boundUsage(nil, facts)
	if u.GetCpuSeconds() != 3 || u.GetPeakMemoryBytes() != 200<<20 || len(problems) != 0 {
		t.Fatalf("no exit record: usage %v, problems %q; want the engine's figures", u, problems)
	}
	u, problems = boundUsage(&runlog.Exit{CPUMicros: i64(5_000_000), PeakMemory: i64(300 << 20)}, facts)
	if u.GetCpuSeconds() != 5 || u.GetPeakMemoryBytes() != 300<<20 || len(problems) != 0 {
		t.Fatalf("figures above what the engine saw: usage %v, problems %q; want them as they are", u, problems)
	}
}
