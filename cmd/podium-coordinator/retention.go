package main

import (
	"time"

	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/internal/taskspec"
)

// longFlag is a duration that may be given in days or years ("90d", "1y") as
// well as Go's units ("36h"): retention is thought of in days.
type longFlag struct{ d *time.Duration }

func (f longFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return taskspec.FormatLong(*f.d)
}

func (f longFlag) Set(v string) error {
	d, err := taskspec.ParseLongDuration(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// retentionFlags are the rows of serve's flag table for c, each with its
// PODIUM_* variable; c.Check is for once they are parsed. A variable with a
// bad value is refused at once, naming the variable.
func retentionFlags(c *retention.Config) []envFlag {
	var flags []envFlag
	for _, f := range []struct {
		name, env string
		into      *time.Duration
		usage     string
	}{
		{"retain-tasks", "PODIUM_RETAIN_TASKS", &c.Tasks, "how long a task is kept after it ended, with its log and artifacts, unless its spec says (retain); e.g. 90d, 1y, 36h (default 90d)"},
		{"retain-logs", "PODIUM_RETAIN_LOGS", &c.Logs, "how long a task's log is kept after it ended (default: as long as the task)"},
		{"retain-artifacts", "PODIUM_RETAIN_ARTIFACTS", &c.Artifacts, "how long an artifact is kept after it was stored (default 30d)"},
		{"retain-audit", "PODIUM_RETAIN_AUDIT", &c.Audit, "how long audit rows, and the record that a task expired, are kept (default 1y)"},
	} {
		flags = append(flags, valueFlag(longFlag{f.into}, f.name, f.env, "", f.usage+" ("+f.env+")", false))
	}
	return append(flags, durationFlag(&c.Every, "retention-every", "PODIUM_RETENTION_EVERY", retention.DefaultEvery,
		"how often the leader expires what is past its retention (PODIUM_RETENTION_EVERY)"))
}
