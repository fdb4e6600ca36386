package imagegc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustPatterns(t *testing.T, ss ...string) []Pattern {
	t.Helper()
	ps, err := ParsePatterns(ss)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// The plan: only images unused for long enough, none kept or protected,
// least recently used first, the larger first between equals.
func TestPlanLeastRecentlyUsedFirst(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	imgs := []Image{
		{ID: "sha256:recent", Tags: []string{"app:recent"}, LastUsed: ago(time.Hour)},
		{ID: "sha256:two-days", Tags: []string{"app:2d"}, Size: 10, LastUsed: ago(48 * time.Hour)},
		{ID: "sha256:five-days", Tags: []string{"app:5d"}, Size: 10, LastUsed: ago(120 * time.Hour)},
		{ID: "sha256:two-days-big", Tags: []string{"app:2d-big"}, Size: 99, LastUsed: ago(48 * time.Hour)},
		{ID: "sha256:kept", Tags: []string{"alpine:3"}, LastUsed: ago(1000 * time.Hour)},
		{ID: "sha256:kept-by-digest", Digests: []string{"registry.example.com/base/img@sha256:abc"}, LastUsed: ago(1000 * time.Hour)},
		{ID: "sha256:protected", Tags: []string{"podium/agent:1"}, LastUsed: ago(1000 * time.Hour)},
		{ID: "sha256:just-unused", LastUsed: ago(24 * time.Hour)},
	}
	got := Plan(imgs, now, 24*time.Hour, mustPatterns(t, "alpine:*", "registry.example.com/base/*"), map[string]bool{"sha256:protected": true})
	var ids []string
	for _, im := range got {
		ids = append(ids, im.ID)
	}
	want := "sha256:five-days sha256:two-days-big sha256:two-days sha256:just-unused"
	if strings.Join(ids, " ") != want {
		t.Fatalf("plan %v, want %s", ids, want)
	}
}

// Patterns: globs on repo:tag, Docker Hub's short and long names alike,
// names by digest matched by a pattern with any tag; bad ones refused with
// what to give.
func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		im      Image
		keep    bool
	}{
		{"alpine:*", Image{Tags: []string{"alpine:3"}}, true},
		{"alpine", Image{Tags: []string{"alpine:latest"}}, true},
		{"alpine:3.*", Image{Tags: []string{"alpine:edge"}}, false},
		{"docker.io/library/alpine:*", Image{Tags: []string{"alpine:3"}}, true},
		{"docker.io/grafana/*:*", Image{Tags: []string{"grafana/agent:1"}}, true},
		{"registry.example.com/base/*", Image{Tags: []string{"registry.example.com/base/go:1.26"}}, true},
		{"registry.example.com/base/*", Image{Tags: []string{"registry.example.com/base/deep/go:1"}}, false},
		{"localhost:5000/x:*", Image{Tags: []string{"localhost:5000/x:1"}}, true},
		{"registry.example.com/base/*", Image{Digests: []string{"registry.example.com/base/go@sha256:00"}}, true},
		{"alpine:3", Image{Digests: []string{"alpine@sha256:00"}}, false},
		{"alpine:*", Image{Tags: []string{"myalpine:3"}}, false},
	} {
		got := kept(tc.im, mustPatterns(t, tc.pattern))
		if got != tc.keep {
			t.Errorf("pattern %q on %v: kept %v, want %v", tc.pattern, tc.im, got, tc.keep)
		}
	}
	for _, tc := range []struct{ pattern, err string }{
		{"", "empty image pattern"},
		{"alpine:[", "not a valid glob"},
		{"[a-:x", "not a valid glob"},
		{"alpine:", "give both a repository and a tag"},
		{"al pine", "white space"},
		{strings.Repeat("a", MaxPatternLen+1), "longer than"},
	} {
		if _, err := ParsePattern(tc.pattern); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParsePattern(%q) = %v, want an error saying %q", tc.pattern, err, tc.err)
		}
	}
	many := make([]string, MaxKeep+1)
	for i := range many {
		many[i] = "a:*"
	}
	if _, err := ParsePatterns(many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d patterns: %v, want refused", len(many), err)
	}
}

// The record survives a restart, is bounded, and one that cannot be read is
// replaced by an empty one (every image new again, the careful side).
func TestRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := map[string]time.Time{"sha256:a": t0, "sha256:b": t0.Add(time.Hour)}
	if err := saveRecord(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := loadRecord(dir)
	if err != nil || len(got) != 2 || !got["sha256:a"].Equal(t0) {
		t.Fatalf("loaded %v (%v), want what was saved", got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files in the directory, want the record alone (no temporary file left)", len(entries))
	}

	big := map[string]time.Time{}
	for i := range MaxRecorded + 10 {
		big[strings.Repeat("x", 4)+string(rune('a'+i%26))+time.Duration(i).String()] = t0.Add(time.Duration(i) * time.Second)
	}
	trim(big, MaxRecorded)
	if len(big) != MaxRecorded {
		t.Fatalf("trimmed to %d, want %d", len(big), MaxRecorded)
	}
	for _, at := range big {
		if at.Before(t0.Add(10 * time.Second)) {
			t.Fatalf("an entry used at %s survived the trim; the ten used longest ago go", at)
		}
	}

	for name, content := range map[string][]byte{
		"garbage": []byte("{not json"),
		"huge":    make([]byte, maxRecordBytes+1),
	} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, RecordFile), content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := loadRecord(d)
		if err == nil || len(got) != 0 {
			t.Errorf("%s record: %v entries, error %v; want none and an error", name, len(got), err)
		}
	}
}

// Config.Check refuses what a person could give wrong.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{Unused: -time.Second}, {LowFree: -1}, {LowFree: 100.5}, {Interval: -1}} {
		if err := c.Check(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{LowFree: 100, Unused: time.Hour}).Check(); err != nil {
		t.Errorf("a valid config refused: %v", err)
	}
}
