package version

import "strings"

// Debian turns a version string the binaries report (git describe: v1.2.3,
// v1.2.3-4-gabcdef0, v1.2.3-rc1) into the Debian version of the package
// built from the same tree, by the rules of scripts/deb-version.sh: no
// leading v, "~" before a pre-release, "+gitN.gHASH" after the release for
// N commits past it. It reports false for a string that is no release
// version (a bare commit hash, "dev"), which has no place in Debian's order.
//
// The agent reports the binary's version, not its package's, and the two
// must compare the same way apt compares the packages: that is what decides
// whether `apt-get upgrade` would move a node.
func Debian(v string) (string, bool) {
	v = strings.TrimSuffix(v, "-dirty")
	v = strings.TrimPrefix(v, "v")
	if v == "" || v[0] < '0' || v[0] > '9' {
		return "", false
	}
	// v1.2.3-4-gabcdef0 and v1.2.3-rc1-4-gabcdef0: the last two fields are
	// git describe's.
	base, count, hash := v, "", ""
	if i := strings.LastIndex(v, "-g"); i > 0 {
		if j := strings.LastIndex(v[:i], "-"); j > 0 && isDigits(v[j+1:i]) {
			base, count, hash = v[:j], v[j+1:i], v[i+1:]
		}
	}
	base = strings.Replace(base, "-", "~", 1)
	if count != "" && count != "0" {
		base += "+git" + count + "." + hash
	}
	return base, true
}

// Older reports whether the binary version a is older than b, in the order
// apt gives their packages. known is false when either is no release version
// (see Debian) and they differ: then neither can be said to be older, only
// different.
func Older(a, b string) (older, known bool) {
	if a == b {
		return false, true
	}
	da, okA := Debian(a)
	db, okB := Debian(b)
	if !okA || !okB {
		return false, false
	}
	return CompareDebian(da, db) < 0, true
}

// CompareDebian compares two Debian versions ([epoch:]upstream[-revision])
// as dpkg does (deb-version(7)): <0 when a sorts before b, 0 when equal, >0
// after.
func CompareDebian(a, b string) int {
	ea, ua, ra := splitDebian(a)
	eb, ub, rb := splitDebian(b)
	if c := compareNumbers(ea, eb); c != 0 {
		return c
	}
	if c := compareFragment(ua, ub); c != 0 {
		return c
	}
	return compareFragment(ra, rb)
}

func splitDebian(v string) (epoch, upstream, revision string) {
	if i := strings.IndexByte(v, ':'); i >= 0 && isDigits(v[:i]) {
		epoch, v = v[:i], v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return epoch, v[:i], v[i+1:]
	}
	return epoch, v, ""
}

// compareFragment is dpkg's verrevcmp: alternately a run of non-digits,
// compared character by character with "~" before everything (even the
// end), letters before other characters; then a run of digits, compared as
// a number.
func compareFragment(a, b string) int {
	for a != "" || b != "" {
		var na, nb string
		na, a = cut(a, false)
		nb, b = cut(b, false)
		if c := compareLexical(na, nb); c != 0 {
			return c
		}
		na, a = cut(a, true)
		nb, b = cut(b, true)
		if c := compareNumbers(na, nb); c != 0 {
			return c
		}
	}
	return 0
}

// cut splits s after its leading run of digits (digits true) or non-digits.
func cut(s string, digits bool) (run, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i], s[i:]
}

func compareLexical(a, b string) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		var ca, cb int
		if i < len(a) {
			ca = order(a[i])
		}
		if i < len(b) {
			cb = order(b[i])
		}
		if ca != cb {
			return ca - cb
		}
	}
	return 0
}

// order is dpkg's weight of a character: "~" sorts before the end of the
// string (0), letters by their code, everything else after all letters.
func order(c byte) int {
	switch {
	case c == '~':
		return -1
	case isDigit(c):
		return 0
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		return int(c)
	default:
		return int(c) + 256
	}
}

// compareNumbers compares two runs of digits as numbers, of any length.
func compareNumbers(a, b string) int {
	a = strings.TrimLeft(a, "0")
	b = strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}
