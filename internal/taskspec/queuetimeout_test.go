package taskspec

import (
	"errors"
	"strings"
	"testing"
)

// queue_timeout is a duration as timeout is: read into whole seconds,
// refused without a unit, negative, past a year or finer than a second,
// naming the key and its line.
func TestParseQueueTimeout(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int64
	}{
		{"image: a\nqueue_timeout: 10m\n", 600},
		{"image: a\nqueue_timeout: 1h30m\n", 5400},
		{"image: a\nqueue_timeout: 0\n", 0},
		{"image: a\nqueue_timeout: ~\n", 0},
		{"image: a\n", 0},
	} {
		got, err := Parse(strings.NewReader(tc.file))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.file, err)
		}
		if got.GetQueueTimeoutSeconds() != tc.want {
			t.Errorf("Parse(%q): queue_timeout_seconds %d, want %d", tc.file, got.GetQueueTimeoutSeconds(), tc.want)
		}
		if err := Validate(got); err != nil {
			t.Errorf("Validate(%q): %v", tc.file, err)
		}
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"no unit", "image: a\nqueue_timeout: 600\n", []string{"line 2", "queue_timeout:", "has no unit", `"600s"`}},
		{"not a duration", "image: a\nqueue_timeout: later\n", []string{"line 2", "queue_timeout:", "not a duration"}},
		{"negative", "image: a\nqueue_timeout: -1m\n", []string{"line 2", "queue_timeout:", "negative"}},
		{"past a year", "image: a\nqueue_timeout: 8761h\n", []string{"line 2", "queue_timeout:", "a year"}},
		{"a fraction of a second", "image: a\nqueue_timeout: 90500ms\n", []string{"line 2", "queue_timeout:", "whole number of seconds", `"1m31s"`}},
		{"a list", "image: a\nqueue_timeout: [1m]\n", []string{"line 2", "queue_timeout: want a duration", "got a list"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

// A spec from the API (not through a file) is bounded the same way, the
// field named as the API names it.
func TestValidateQueueTimeout(t *testing.T) {
	for _, tc := range []struct {
		seconds int64
		problem string
	}{
		{-1, "-1 is negative: give 0 (the coordinator's --queue-timeout) or a number of seconds"},
		{MaxDurationSeconds + 1, "a year"},
	} {
		s := good()
		s.QueueTimeoutSeconds = tc.seconds
		var fe *FieldError
		if err := Validate(s); !errors.As(err, &fe) || fe.Field != "spec.queue_timeout_seconds" || !strings.Contains(fe.Problem, tc.problem) {
			t.Errorf("Validate(queue_timeout_seconds %d) = %v, want spec.queue_timeout_seconds: …%s…", tc.seconds, err, tc.problem)
		}
	}
	s := good()
	s.QueueTimeoutSeconds = MaxDurationSeconds
	if err := Validate(s); err != nil {
		t.Errorf("Validate(queue_timeout_seconds a year) = %v, want it accepted", err)
	}
}
