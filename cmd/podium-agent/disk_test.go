package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// The disk flags: their defaults, days and shares read, and each mistake
// named by its flag with what to give.
func TestDiskFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		unused   time.Duration
		lowFree  float64
		keepData time.Duration
		keep     int
		err      string
	}{
		{name: "defaults", unused: 24 * time.Hour, lowFree: 20},
		{name: "every flag", args: []string{"--image-gc-unused", "7d", "--image-gc-low-free", "12.5%", "--keep-attempt-data", "36h",
			"--image-keep", "alpine:*", "--image-keep", "registry.example.com/base/*,busybox"},
			unused: 7 * 24 * time.Hour, lowFree: 12.5, keepData: 36 * time.Hour, keep: 3},
		{name: "a share without its sign, and the extremes", args: []string{"--image-gc-low-free", "100", "--keep-attempt-data", "365d"},
			unused: 24 * time.Hour, lowFree: 100, keepData: 365 * 24 * time.Hour},
		{name: "0% never removes", args: []string{"--image-gc-low-free", "0%"}, unused: 24 * time.Hour},
		{name: "unused zero", args: []string{"--image-gc-unused", "0"}, err: `--image-gc-unused "0": give a duration above 0`},
		{name: "unused negative", args: []string{"--image-gc-unused", "-1h"}, err: "--image-gc-unused"},
		{name: "unused garbage", args: []string{"--image-gc-unused", "soon"}, err: "e.g. 24h or 7d"},
		{name: "fractional days", args: []string{"--image-gc-unused", "1.5d"}, err: "--image-gc-unused"},
		{name: "share above 100", args: []string{"--image-gc-low-free", "101%"}, err: `--image-gc-low-free "101%": give a share of the disk between 0% and 100%`},
		{name: "share negative", args: []string{"--image-gc-low-free", "-5"}, err: "--image-gc-low-free"},
		{name: "share NaN", args: []string{"--image-gc-low-free", "NaN"}, err: "--image-gc-low-free"},
		{name: "keep data negative", args: []string{"--keep-attempt-data", "-1s"}, err: "--keep-attempt-data"},
		{name: "keep data over a year", args: []string{"--keep-attempt-data", "400d"}, err: "between 0 and 365d"},
		{name: "bad glob", args: []string{"--image-keep", "alpine:["}, err: `--image-keep: image pattern "alpine:[" is not a valid glob`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			df := diskFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			s, err := df.settings()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.unused != tc.unused || s.lowFree != tc.lowFree || s.keepData != tc.keepData || len(s.keep) != tc.keep {
				t.Fatalf("settings %+v, want unused %s, low free %g, keep data %s, %d patterns", s, tc.unused, tc.lowFree, tc.keepData, tc.keep)
			}
		})
	}
}
