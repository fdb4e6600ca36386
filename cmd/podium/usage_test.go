package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

// task get shows what the latest attempt used, in units a person reads, and
// says "unknown" for a figure the node could not measure rather than a 0.
func TestTaskGetShowsUsage(t *testing.T) {
	task := &podiumv1.Task{Id: "task_1", Usage: &podiumv1.Usage{CpuSeconds: f64(1.0234), PeakMemoryBytes: i64(104 << 20),
		WallSeconds: f64(3.14), OutputBytes: 12 << 10, ArtifactBytes: 0}}
	var out bytes.Buffer
	writeTask(&out, task, time.Now())
	want := regexp.MustCompile(`(?m)^usage: +cpu 1\.02 s, peak memory 104 MiB, wall 3\.1 s, output 12 KiB, artifacts 0 B$`)
	if !want.MatchString(out.String()) {
		t.Errorf("task get printed\n%s\nwant a line matching %s", out.String(), want)
	}
	if got := usageText(&podiumv1.Usage{OutputBytes: 1536, ArtifactBytes: 5 << 30, WallSeconds: f64(3723)}); got !=
		"cpu unknown, peak memory unknown, wall 1h2m3s, output 1.5 KiB, artifacts 5.0 GiB" {
		t.Errorf("unknown figures and big ones: %q", got)
	}
	out.Reset()
	writeTask(&out, &podiumv1.Task{Id: "task_2"}, time.Now())
	if strings.Contains(out.String(), "usage") {
		t.Errorf("a task that never ran shows usage:\n%s", out.String())
	}
}
