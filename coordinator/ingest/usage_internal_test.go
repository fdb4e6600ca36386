package ingest

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

func statusWith(u *podiumv1.Usage) *podiumv1.TaskEvent {
	return &podiumv1.TaskEvent{TaskId: "task_X", Attempt: 1, Seq: 7, Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
		State: podiumv1.TaskState_TASK_STATE_SUCCEEDED, Usage: u}}}
}

// A report that cannot be a measurement is stored as unknown, one that is
// more than the node can give is cut to what it can, the node's own counts of
// output and artifacts are not taken, and the replica's log says each, naming
// the node and the task. Honest figures pass untouched.
func TestBadUsageReportsAreRefusedOrCutWithAReason(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// The node's capacity as its session last recorded it.
	machine := func() (float64, int64) { return 2, 1024 }

	honest := &podiumv1.Usage{CpuSeconds: f64(1.02), PeakMemoryBytes: i64(104 << 20), WallSeconds: f64(3.1)}
	negative := &podiumv1.Usage{CpuSeconds: f64(-1), PeakMemoryBytes: i64(-5), WallSeconds: f64(-2)}
	absurd := &podiumv1.Usage{CpuSeconds: f64(1e9), PeakMemoryBytes: i64(8 << 30), WallSeconds: f64(10),
		OutputBytes: 1 << 50, ArtifactBytes: 1 << 50}
	notNumbers := &podiumv1.Usage{CpuSeconds: f64(math.NaN()), WallSeconds: f64(math.Inf(1)), PeakMemoryBytes: i64(math.MaxInt64)}
	CheckEventUsage(log, "node_A", machine, []*podiumv1.TaskEvent{statusWith(honest), statusWith(negative), statusWith(absurd), statusWith(notNumbers)})

	if honest.GetCpuSeconds() != 1.02 || honest.GetPeakMemoryBytes() != 104<<20 || honest.GetWallSeconds() != 3.1 {
		t.Errorf("honest figures changed: %v", honest)
	}
	if negative.CpuSeconds != nil || negative.PeakMemoryBytes != nil || negative.WallSeconds != nil {
		t.Errorf("negative figures kept: %v; want all unknown", negative)
	}
	if want := 10*2*cpuSlackFactor + cpuSlackSeconds; absurd.GetCpuSeconds() != want || absurd.GetPeakMemoryBytes() != 1<<30 ||
		absurd.GetWallSeconds() != 10 || absurd.GetOutputBytes() != 0 || absurd.GetArtifactBytes() != 0 {
		t.Errorf("absurd figures: %v; want cpu %.2f s (10 s × 2 cores), peak 1 GiB (the node's memory), wall 10 s, "+
			"and the node's byte counts dropped", absurd, want)
	}
	if notNumbers.CpuSeconds != nil || notNumbers.WallSeconds != nil || notNumbers.PeakMemoryBytes != nil {
		t.Errorf("NaN, infinity and 8 EiB kept: %v; want all unknown", notNumbers)
	}
	out := logs.String()
	for _, want := range []string{
		"CPU time -1 s is not a measurement; stored as unknown",
		"peak memory -5 B is not a measurement",
		"wall time -2 s is not a measurement",
		"CPU time 1000000000.000 s is more than 10.000 s of wall time on 2 cores allow",
		"peak memory 8589934592 B is more than the node's 1024 MB; stored 1073741824 B",
		"CPU time NaN s is not a measurement",
		"wall time +Inf s is not a measurement",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the replica's log does not say %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "node=node_A task=task_X attempt=1") != 8 {
		t.Errorf("want 8 warnings, each naming the node, the task and the attempt:\n%s", out)
	}
}
