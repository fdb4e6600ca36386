package taskspec

import (
	"strings"
	"testing"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestParseLongDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90d": 90 * Day, "1y": Year, "36h": 36 * time.Hour, "90m": 90 * time.Minute,
		" 7d ": 7 * Day, "100y": 100 * Year, "1h30m": 90 * time.Minute,
	} {
		got, err := ParseLongDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseLongDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"":              "empty",
		"90":            "has no unit",
		"d":             "not a duration",
		"1.5d":          "not a duration",
		"1y6d":          "not a duration",
		"-3d":           "not a duration",
		"0d":            "not a positive duration",
		"0s":            "not a positive duration",
		"-1h":           "not a positive duration",
		"soon":          "not a duration",
		"101y":          "more than 100 years",
		"999999999999h": "not a duration",
	} {
		_, err := ParseLongDuration(in)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseLongDuration(%q) = %v; want an error saying %q", in, err, says)
		}
		if err != nil && says != "empty" && says != "more than 100 years" && !strings.Contains(err.Error(), `"90d"`) {
			t.Errorf("ParseLongDuration(%q) = %v; want it to show the accepted form", in, err)
		}
	}
}

func TestFormatLong(t *testing.T) {
	for d, want := range map[time.Duration]string{Year: "1y", 90 * Day: "90d", time.Hour: "1h", 36 * time.Hour: "36h", 90 * time.Minute: "1h30m0s"} {
		if got := FormatLong(d); got != want {
			t.Errorf("FormatLong(%v) = %q, want %q", d, got, want)
		}
	}
}

// retain in a spec is a duration in days or years, stored as seconds, from
// an hour to ten years.
func TestRetainInSpec(t *testing.T) {
	spec, err := Parse(strings.NewReader("image: a\nretain: 7d\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.GetRetainSeconds(); got != 7*24*3600 {
		t.Fatalf("retain_seconds = %d, want %d", got, 7*24*3600)
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, says string }{
		{"image: a\nretain: 30m\n", "shorter than 1h"},
		{"image: a\nretain: 11y\n", "more than 10y"},
		{"image: a\nretain: 7\n", "has no unit"},
		{"image: a\nretain: [7d]\n", "want a duration"},
	} {
		_, err := Parse(strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "retain") {
			t.Errorf("Parse(%q) = %v; want an error about retain saying %q", tc.file, err, tc.says)
		}
	}
	for secs, says := range map[int64]string{
		-1:                   "negative",
		59:                   "shorter than 1h",
		MaxRetainSeconds + 1: "more than 10y",
	} {
		err := Validate(&podiumv1.TaskSpec{Image: "a", RetainSeconds: secs})
		if err == nil || !strings.Contains(err.Error(), "spec.retain_seconds") || !strings.Contains(err.Error(), says) {
			t.Errorf("Validate(retain_seconds %d) = %v; want spec.retain_seconds: ... %s", secs, err, says)
		}
	}
	for _, secs := range []int64{0, 3600, MaxRetainSeconds} {
		if err := Validate(&podiumv1.TaskSpec{Image: "a", RetainSeconds: secs}); err != nil {
			t.Errorf("Validate(retain_seconds %d) = %v, want it accepted", secs, err)
		}
	}
}
