package version

import (
	"os/exec"
	"testing"
)

// The comparison agrees with dpkg's own, on the cases that matter for
// Podium's versions and on deb-version(7)'s corner cases.
func TestCompareDebianAgreesWithDpkg(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{"1.2.3", "1.2.4"},
		{"1.2.3", "1.2.3+git4.gabcdef0"},
		{"1.2.3+git4.gabcdef0", "1.2.4"},
		{"1.2.3+git4.gabcdef0", "1.2.3+git10.g0000000"},
		{"1.2.3~rc1", "1.2.3"},
		{"1.2.3~rc1", "1.2.3~rc2"},
		{"1.10", "1.9"},
		{"1.0-1", "1.0-2"},
		{"1:0.1", "2.0"},
		{"0.0.0+git20260508T120000.gabcdef0", "0.0.0+git20260509T000000.g1234567"},
		{"1.0a", "1.0+"},
		{"1.0~", "1.0"},
		{"1.0", "1.0"},
		{"01.0", "1.0"},
	}
	dpkg, err := exec.LookPath("dpkg")
	for _, p := range pairs {
		got := CompareDebian(p[0], p[1])
		if err != nil {
			continue
		}
		// dpkg --compare-versions a lt b exits 0 when a < b.
		want := 0
		if exec.Command(dpkg, "--compare-versions", p[0], "lt", p[1]).Run() == nil {
			want = -1
		} else if exec.Command(dpkg, "--compare-versions", p[0], "gt", p[1]).Run() == nil {
			want = 1
		}
		if sign(got) != want {
			t.Errorf("CompareDebian(%q, %q) = %d, dpkg says %d", p[0], p[1], got, want)
		}
	}
	if err != nil {
		t.Log("dpkg is not installed: compared without it")
	}
}

func TestOlder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b         string
		older, known bool
	}{
		{"v1.2.3", "v1.2.4", true, true},
		{"v1.2.4", "v1.2.3", false, true},
		{"v1.2.3", "v1.2.3-4-gabcdef0", true, true},
		{"v1.2.3-rc1", "v1.2.3", true, true},
		{"v1.2.3-rc1-2-gabcdef0", "v1.2.3", true, true},
		{"0.0.1", "0.0.2", true, true},
		{"abcdef0", "abcdef0", false, true},
		{"abcdef0", "1234567", false, false},
		{"dev", "v1.0.0", false, false},
	} {
		older, known := Older(c.a, c.b)
		if older != c.older || known != c.known {
			t.Errorf("Older(%q, %q) = %v, %v; want %v, %v", c.a, c.b, older, known, c.older, c.known)
		}
	}
}

func TestDebianMatchesDebVersionScript(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"v1.2.3":                "1.2.3",
		"v1.2.3-4-gabcdef0":     "1.2.3+git4.gabcdef0",
		"v1.2.3-rc1":            "1.2.3~rc1",
		"v1.2.3-rc1-4-gabcdef0": "1.2.3~rc1+git4.gabcdef0",
		"v1.2.3-0-gabcdef0":     "1.2.3",
	} {
		if got, ok := Debian(in); !ok || got != want {
			t.Errorf("Debian(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
