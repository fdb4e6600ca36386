package main

import (
	"fmt"
	"strings"

	"github.com/podiumhq/podium/internal/units"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// usageText says what a task's latest attempt used, as "podium task get"
// shows it: "cpu 1.02 s, peak memory 104 MiB, wall 3.1 s, output 12 KiB,
// artifacts 0 B". A figure the node could not measure is "unknown", never a
// 0 that was not measured; "" when the task has not run.
func usageText(u *podiumv1.Usage) string {
	if u == nil {
		return ""
	}
	var parts []string
	if u.CpuSeconds != nil {
		parts = append(parts, "cpu "+units.CPU(u.GetCpuSeconds()))
	} else {
		parts = append(parts, "cpu unknown")
	}
	if u.PeakMemoryBytes != nil {
		parts = append(parts, "peak memory "+compactSize(u.GetPeakMemoryBytes()))
	} else {
		parts = append(parts, "peak memory unknown")
	}
	if u.WallSeconds != nil {
		parts = append(parts, "wall "+units.Wall(u.GetWallSeconds()))
	} else {
		parts = append(parts, "wall unknown")
	}
	parts = append(parts, "output "+compactSize(u.GetOutputBytes()), "artifacts "+compactSize(u.GetArtifactBytes()))
	return strings.Join(parts, ", ")
}

// compactSize is a byte count in binary units, whole from 10 up ("104 MiB",
// "12 KiB") and with one decimal below ("3.5 GiB"), bytes as they are.
func compactSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n)/unit, 0
	for v >= unit && exp < 5 {
		v /= unit
		exp++
	}
	if v >= 10 {
		return fmt.Sprintf("%.0f %ciB", v, "KMGTPE"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}
