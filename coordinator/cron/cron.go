// Package cron serves podium.v1.ScheduleService and runs the leader's
// job that fires schedules' ticks.
//
// A schedule's next tick lives in its row (next_run_at), not in a timer, so
// that a leader change loses nothing: the new leader reads the same rows.
// Each tick is stored as a (schedule, tick) row in the transaction that
// creates the tick's task; two replicas that both believe they lead for a
// moment (a lock has no fencing token) cannot both create it.
//
// After downtime (no leader, or every replica stopped) a schedule catches up
// at most one missed tick: the leader fires the earliest tick it missed and
// then moves next_run_at to the first tick after now. A schedule every
// minute that was down for an hour runs once on return, not sixty times.
package cron

import (
	"fmt"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// Bounds on what a schedule may be.
const (
	// MaxCronBytes bounds a cron expression; five fields of lists fit.
	MaxCronBytes = 256
	// MaxNameBytes bounds a schedule's name.
	MaxNameBytes = 64
	// MaxTimezoneBytes bounds an IANA zone name.
	MaxTimezoneBytes = 64
)

// Overlap modes: what a tick does while the previous tick's task still runs.
const (
	OverlapSkip           = "skip"
	OverlapAllow          = "allow"
	OverlapCancelPrevious = "cancel_previous"
)

// parser reads standard 5-field expressions (minute hour dom month dow) and
// the @hourly-style descriptors; no seconds field, no CRON_TZ= prefix (the
// zone is its own field, so it is validated and shown on its own).
var parser = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

// Parse checks a cron expression and a timezone and returns the schedule
// they make, read in that zone. The error names the field and what is wrong.
func Parse(expr, timezone string) (robfig.Schedule, *time.Location, error) {
	if expr == "" {
		return nil, nil, fmt.Errorf("cron: required, a 5-field expression such as '*/15 * * * *'")
	}
	if len(expr) > MaxCronBytes {
		return nil, nil, fmt.Errorf("cron: %d bytes is more than %d", len(expr), MaxCronBytes)
	}
	if len(timezone) > MaxTimezoneBytes {
		return nil, nil, fmt.Errorf("timezone: %d bytes is more than %d", len(timezone), MaxTimezoneBytes)
	}
	if timezone == "" {
		timezone = "UTC"
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil || timezone == "Local" {
		return nil, nil, fmt.Errorf("timezone: %q is not an IANA time zone name (such as UTC or Europe/Berlin)", timezone)
	}
	if len(expr) > 0 && (expr[0] == 'T' || expr[0] == 'C') {
		return nil, nil, fmt.Errorf("cron: %q: give the zone with --timezone, not in the expression", expr)
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, nil, fmt.Errorf("cron: %q is not a 5-field cron expression (minute hour day-of-month month day-of-week): %w", expr, err)
	}
	return sched, loc, nil
}

// Next is the first tick of sched in loc strictly after t, in UTC and whole
// seconds (Postgres stores microseconds; a tick's identity must survive the
// round trip exactly).
func Next(sched robfig.Schedule, loc *time.Location, t time.Time) time.Time {
	return sched.Next(t.In(loc)).UTC().Truncate(time.Second)
}
