package taskspec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units ParseSize knows, by their lower-case spelling.
// The IEC ones (KiB, MiB, ...) are powers of 1024; the SI ones (kB, MB, ...)
// powers of 1000, as their standards say. Both are accepted because people
// write both, and either is exact about what it means.
var sizeUnits = map[string]int64{
	"b":   1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ParseSize reads a byte size: a whole number of bytes ("1048576") or a
// number with a unit ("100MiB", "1.5 GiB", "500MB"). Units are KiB, MiB, GiB
// and TiB (powers of 1024) or kB, MB, GB and TB (powers of 1000), in any
// case; a bare "K", "M" or "G" is refused, because it is not clear which of
// the two it means. The result is a whole, non-negative number of bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
	}
	if num == "" {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("%q is negative: give a size of 0 or more, e.g. \"100MiB\"", s)
		}
		return 0, fmt.Errorf("%q is not a size: write bytes (\"1048576\") or a number with a unit (\"100MiB\", \"1GiB\")", s)
	}
	mult := int64(1)
	if unit != "" {
		m, ok := sizeUnits[unit]
		if !ok {
			return 0, fmt.Errorf("%q has an unknown unit %q: use B, KiB, MiB, GiB or TiB (or kB, MB, GB, TB)", s, s[i:])
		}
		mult = m
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%q is too big: give at most %d bytes", s, int64(math.MaxInt64))
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: write bytes (\"1048576\") or a number with a unit (\"100MiB\", \"1GiB\")", s)
	}
	b := f * float64(mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too big: give at most %d bytes", s, int64(math.MaxInt64))
	}
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("%q is not a whole number of bytes: give it in a smaller unit", s)
	}
	return int64(b), nil
}

// FormatSize writes n bytes the way a person reads them: in the largest IEC
// unit that keeps at most one decimal exact enough ("1 GiB", "1.5 MiB",
// "512 B").
func FormatSize(n int64) string {
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if n >= u.size {
			if n%u.size == 0 {
				return fmt.Sprintf("%d %s", n/u.size, u.name)
			}
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64) + " " + u.name
		}
	}
	return fmt.Sprintf("%d B", n)
}
