package taskspec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "100MiB": 100 << 20, "1GiB": 1 << 30, "1 GiB": 1 << 30, "1.5KiB": 1536,
		"2mib": 2 << 20, "500MB": 500e6, "1kB": 1000, "7B": 7, "1TiB": 1 << 40, " 3 MiB ": 3 << 20,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"":                     "not a size",
		"MiB":                  "not a size",
		"-1MiB":                "negative",
		"10M":                  `unknown unit "M"`,
		"10 bits":              "unknown unit",
		"1.3B":                 "not a whole number of bytes",
		"1.2.3":                "not a size",
		"9EiB":                 "unknown unit",
		"99999999999999999999": "too big",
		"9999999TiB":           "too big",
	} {
		if got, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error saying %q", in, got, err, says)
		}
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0 B", 512: "512 B", 1 << 10: "1 KiB", 1 << 20: "1 MiB", 1 << 30: "1 GiB", 3 << 19: "1.5 MiB", 100 << 20: "100 MiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// output_limit takes a size or a number of bytes; a negative one is refused
// by Validate, naming the field as the API does.
func TestOutputLimit(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]int64{
		"image: a\noutput_limit: 100MiB\n":  100 << 20,
		"image: a\noutput_limit: 1048576\n": 1 << 20,
		"image: a\noutput_limit: 0\n":       0,
		"image: a\n":                        0,
	} {
		spec, err := Parse(strings.NewReader(file))
		if err != nil || spec.GetOutputLimitBytes() != want {
			t.Errorf("Parse(%q): output_limit_bytes %d, %v; want %d", file, spec.GetOutputLimitBytes(), err, want)
		}
	}
	for file, says := range map[string]string{
		"image: a\noutput_limit: lots\n":  `line 2: output_limit: "lots" is not a size`,
		"image: a\noutput_limit: 10M\n":   `line 2: output_limit: "10M" has an unknown unit`,
		"image: a\noutput_limit: [1]\n":   "line 2: output_limit: want a size",
		"image: a\noutput_limit: 1.5B\n":  "not a whole number of bytes",
		"image: a\noutput_limit: -1MiB\n": "negative",
	} {
		if _, err := Parse(strings.NewReader(file)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%q) = %v; want an error saying %q", file, err, says)
		}
	}
	spec, err := Parse(strings.NewReader("image: a\noutput_limit: -5\n"))
	if err != nil {
		t.Fatal(err)
	}
	var fe *FieldError
	if err := Validate(spec); !errors.As(err, &fe) || fe.Field != "spec.output_limit_bytes" || !strings.Contains(fe.Problem, "negative") {
		t.Fatalf("Validate of output_limit -5 = %v; want a FieldError for spec.output_limit_bytes", err)
	}
}
