// Package units writes the figures of a task's usage the one way podium
// task get and the console both show them, so that the same attempt never
// reads "0.0 s" in one place and "0.03 s" in another.
package units

import (
	"fmt"
	"time"
)

// CPU is CPU time in seconds with two decimals ("0.03 s", "12.40 s"): a
// short task's CPU time is a few hundredths of a second, which one decimal
// would round to nothing.
func CPU(seconds float64) string { return fmt.Sprintf("%.2f s", seconds) }

// Wall is a wall time: seconds with one decimal under a minute ("3.1 s"),
// then hours, minutes and seconds ("1h2m3s").
func Wall(seconds float64) string {
	if seconds < 60 {
		return fmt.Sprintf("%.1f s", seconds)
	}
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}
