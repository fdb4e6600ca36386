package main

// The flags of the node's disk hygiene: image garbage collection and how
// long finished attempts' data is kept.

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/podiumhq/podium/agent/imagegc"
)

// maxKeepAttemptData bounds --keep-attempt-data: data kept longer than this
// is an archive, which the node is not.
const maxKeepAttemptData = 365 * 24 * time.Hour

// diskFlagSet holds the flags as given.
type diskFlagSet struct {
	unused, lowFree, keepData string
	keep                      stringList
}

// diskSettings are the flags read.
type diskSettings struct {
	unused   time.Duration
	lowFree  float64
	keep     []imagegc.Pattern
	keepData time.Duration
}

func diskFlags(fs *flag.FlagSet) *diskFlagSet {
	d := &diskFlagSet{}
	fs.StringVar(&d.unused, "image-gc-unused", "24h",
		"remove an image only once no task on this node has used it for this `duration` (e.g. 24h, 7d)")
	fs.StringVar(&d.lowFree, "image-gc-low-free", "20%",
		"remove unused images, least recently used first, while the data disk or the engine's root has less free space than this `share` (0% never removes one)")
	fs.Var(&d.keep, "image-keep", "never remove images whose repo:tag matches this `glob`, e.g. alpine:* or registry.example.com/base/* (repeatable)")
	fs.StringVar(&d.keepData, "keep-attempt-data", "0",
		"keep a finished attempt's directory (runner logs, uploads, copies) this `duration` for debugging (0: remove it once its status is stored and its uploads are done)")
	return d
}

// settings reads the flags, naming the one that is wrong and what to give.
func (d *diskFlagSet) settings() (diskSettings, error) {
	var s diskSettings
	var err error
	if s.unused, err = parseDays(d.unused); err != nil || s.unused <= 0 {
		return s, fmt.Errorf("--image-gc-unused %q: give a duration above 0, e.g. 24h or 7d", d.unused)
	}
	if s.lowFree, err = parseShare(d.lowFree); err != nil {
		return s, fmt.Errorf("--image-gc-low-free %q: %v", d.lowFree, err)
	}
	if s.keepData, err = parseDays(d.keepData); err != nil || s.keepData < 0 || s.keepData > maxKeepAttemptData {
		return s, fmt.Errorf("--keep-attempt-data %q: give a duration between 0 and 365d, e.g. 24h (0 removes the data at once)", d.keepData)
	}
	if s.keep, err = imagegc.ParsePatterns(d.keep); err != nil {
		return s, fmt.Errorf("--image-keep: %v", err)
	}
	return s, nil
}

// parseDays reads a Go duration, or a whole number of days ("7d"); "0" is
// zero.
func parseDays(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.ParseUint(n, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("want a whole number of days, e.g. 7d")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// parseShare reads a percentage between 0 and 100, with or without its %.
func parseShare(v string) (float64, error) {
	n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "%"), 64)
	if err != nil || n != n || n < 0 || n > 100 {
		return 0, fmt.Errorf("give a share of the disk between 0%% and 100%%, e.g. 20%%")
	}
	return n, nil
}
