package taskspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Day and Year are the units ParseLongDuration adds to Go's: retention is
// thought of in days and years, and "2160h" is nobody's way of writing 90
// days. A year is 365 days: retention needs no calendar.
const (
	Day  = 24 * time.Hour
	Year = 365 * Day
)

// MinRetain and MaxRetain bound a spec's retain. Under an hour, a task could
// be gone before its submitter has read its result; over ten years is a
// number nobody meant, and a duration of nanoseconds in an int64 ends at 292
// years.
const (
	MinRetain        = time.Hour
	MaxRetain        = 10 * Year
	MaxRetainSeconds = int64(MaxRetain / time.Second)
)

// LongDurationForm is how ParseLongDuration's input is described in errors.
const LongDurationForm = `a duration such as "36h", "90d" or "1y" (units s, m, h, d for days, y for 365 days)`

// ParseLongDuration reads a duration that may be given in days ("90d") or
// years ("1y") as well as any Go duration ("36h", "90m"). A day or year count
// is a whole number, alone: "1y6d" is refused rather than guessed at. It
// refuses what is negative, zero or over 100 years; callers bound it further.
func ParseLongDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty: want %s", LongDurationForm)
	}
	var d time.Duration
	if unit := s[len(s)-1]; unit == 'd' || unit == 'y' {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration: want %s", s, LongDurationForm)
		}
		per := Day
		if unit == 'y' {
			per = Year
		}
		if n > 100*int64(Year/per) {
			return 0, fmt.Errorf("%q is more than 100 years", s)
		}
		d = time.Duration(n) * per
	} else {
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return 0, fmt.Errorf("%q has no unit: want %s", s, LongDurationForm)
		}
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration: want %s", s, LongDurationForm)
		}
		if d > 100*Year {
			return 0, fmt.Errorf("%q is more than 100 years", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration: want %s", s, LongDurationForm)
	}
	return d, nil
}

// ParseRetain reads a spec's or the CLI's retain ("7d", "1y", "36h") as whole
// seconds, within [MinRetain, MaxRetain].
func ParseRetain(s string) (int64, error) {
	d, err := ParseLongDuration(s)
	if err != nil {
		return 0, err
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%q is not a whole number of seconds", s)
	}
	secs := int64(d / time.Second)
	if err := checkRetain("retain", secs); err != nil {
		return 0, errors.New(err.Problem)
	}
	return secs, nil
}

// checkRetain bounds a retain given in seconds; 0 means the coordinator's
// --retain-tasks.
func checkRetain(field string, seconds int64) *FieldError {
	switch {
	case seconds < 0:
		return fieldErr(field, "%d is negative: give 0 (the coordinator's --retain-tasks) or a duration of %s to %s", seconds, FormatLong(MinRetain), FormatLong(MaxRetain))
	case seconds == 0:
		return nil
	case seconds < int64(MinRetain/time.Second):
		return fieldErr(field, "%s is shorter than %s: a task must outlive the time its submitter takes to read it; give at least %s",
			FormatLong(time.Duration(seconds)*time.Second), FormatLong(MinRetain), FormatLong(MinRetain))
	case seconds > MaxRetainSeconds:
		return fieldErr(field, "%d seconds is more than %s: give at most %s (e.g. \"1y\"), or leave it out for the coordinator's --retain-tasks",
			seconds, FormatLong(MaxRetain), FormatLong(MaxRetain))
	}
	return nil
}

// FormatLong writes d in the units ParseLongDuration reads: whole years or
// days or hours when it is that, else Go's form ("90m0s").
func FormatLong(d time.Duration) string {
	switch {
	case d > 0 && d%Year == 0:
		return strconv.FormatInt(int64(d/Year), 10) + "y"
	case d > 0 && d%Day == 0:
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d < time.Hour && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}
