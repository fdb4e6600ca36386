package taskspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The allow_egress key of a spec file is a list of ranges, kept as written.
func TestParseAllowEgress(t *testing.T) {
	const file = "image: alpine:3\nallow_egress: [10.20.0.0/16, 192.0.2.10, \"fd00::/8\"]\n"
	got, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := &podiumv1.TaskSpec{Image: "alpine:3", AllowEgress: []string{"10.20.0.0/16", "192.0.2.10", "fd00::/8"}}
	if !proto.Equal(got, want) {
		t.Fatalf("Parse = %v, want %v", got, want)
	}
	if err := Validate(got); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("Validate changed the ranges: %v", got)
	}
}

func TestParseRejectsAllowEgress(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"a string, not a list", "image: a\nallow_egress: 10.0.0.0/8\n", []string{"line 2", "allow_egress: want a list of strings", "e.g. [10.0.0.0/8]"}},
		{"misspelt key", "image: a\nallow_egres: [10.0.0.0/8]\n", []string{"line 2", `unknown key "allow_egres"`, `did you mean "allow_egress"`}},
		{"empty item", "image: a\nallow_egress: [10.0.0.0/8, ~]\n", []string{"line 2", "allow_egress[1]: empty list item"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

func TestParseCIDR(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":          "10.0.0.0/8",
		"192.0.2.10":          "192.0.2.10/32",
		"192.0.2.10/32":       "192.0.2.10/32",
		"0.0.0.0/0":           "0.0.0.0/0",
		"fd00::/8":            "fd00::/8",
		"2001:db8::1":         "2001:db8::1/128",
		"fd7a:115c:a1e0::/48": "fd7a:115c:a1e0::/48",
	} {
		p, err := ParseCIDR(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseCIDR(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for in, problem := range map[string]string{
		"":                    "empty: give a range such as 10.0.0.0/8",
		"10.0.0.1/8":          `"10.0.0.1/8" has bits set past its /8: write 10.0.0.0/8 for the range, or 10.0.0.1/32 for the one address`,
		"10.0.0.0/33":         `"10.0.0.0/33" is not a CIDR range`,
		"example.com":         `"example.com" is not an address or a CIDR range`,
		"10.0.0.0/8 ":         "is not a CIDR range",
		" 10.0.0.1":           "is not an address",
		"fe80::1%eth0":        "is not an address",
		"::ffff:10.0.0.0/104": "is an IPv4 range written as IPv6: write it as IPv4, e.g. 10.0.0.0/8",
		"::ffff:10.0.0.1":     "written as IPv6: write it as IPv4, e.g. 10.0.0.1/32",
		"10.0.0.0/-1":         "is not a CIDR range",
	} {
		if p, err := ParseCIDR(in); err == nil || !strings.Contains(err.Error(), problem) {
			t.Errorf("ParseCIDR(%q) = %v, %v; want an error containing %q", in, p, err, problem)
		}
	}
}

func TestValidateAllowEgress(t *testing.T) {
	for _, ranges := range [][]string{nil, {"10.0.0.0/8"}, {"192.0.2.10", "fd00::/8"}, manyRanges(MaxAllowEgress)} {
		if err := Validate(&podiumv1.TaskSpec{Image: "a", AllowEgress: ranges}); err != nil {
			t.Errorf("Validate with allow_egress %q: %v", ranges, err)
		}
	}
	for _, tc := range []struct {
		name    string
		ranges  []string
		field   string
		problem string
	}{
		{"empty", []string{"10.0.0.0/8", ""}, "spec.allow_egress[1]", "empty"},
		{"not a range", []string{"10.0.0.0/8", "192.0.2.0/24", "metadata"}, "spec.allow_egress[2]", `"metadata" is not an address or a CIDR range`},
		{"host bits", []string{"169.254.169.254/16"}, "spec.allow_egress[0]", "write 169.254.0.0/16"},
		{"too many", manyRanges(MaxAllowEgress + 1), "spec.allow_egress", "more than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(&podiumv1.TaskSpec{Image: "a", AllowEgress: tc.ranges})
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = %q, want field %q and a problem containing %q", err, tc.field, tc.problem)
			}
		})
	}
}

func manyRanges(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	return out
}
