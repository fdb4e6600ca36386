package glob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"dist/*.tar.gz", []string{"dist/a.tar.gz", "dist/.hidden.tar.gz"}, []string{"dist/sub/a.tar.gz", "a.tar.gz", "dist/a.tar", "dist"}},
		{".podium/artifacts/**", []string{".podium/artifacts/r.xml", ".podium/artifacts/a/b/c"}, []string{".podium/x", "r.xml"}},
		{".podium/artifacts/*.xml", []string{".podium/artifacts/r.xml"}, []string{".podium/artifacts/x.log", ".podium/artifacts/sub/r.xml"}},
		{"reports/**/*.xml", []string{"reports/a.xml", "reports/unit/b.xml", "reports/x/y/z/c.xml"}, []string{"reports/a.json", "other/a.xml"}},
		{"**/*.xml", []string{"a.xml", "x/y/a.xml", ".podium/artifacts/r.xml"}, []string{"a.json", "x/a.xml/b"}},
		{"**", []string{"a", "a/b/c"}, nil},
		{"**/**/x", []string{"x", "a/x", "a/b/x"}, []string{"a/y"}},
		{"out/report.txt", []string{"out/report.txt"}, []string{"out/report.txt2", "out/x/report.txt"}},
		{"out/?.txt", []string{"out/a.txt"}, []string{"out/ab.txt", "out//.txt"}},
		{"out/[ab]*.log", []string{"out/a.log", "out/bz.log"}, []string{"out/c.log"}},
		{`lit/\*`, []string{"lit/*"}, []string{"lit/a"}},
	} {
		p, err := Parse(c.pattern)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.pattern, err)
		}
		for _, n := range c.yes {
			if !p.Match(n) {
				t.Errorf("%q does not match %q, want a match", c.pattern, n)
			}
		}
		for _, n := range c.no {
			if p.Match(n) {
				t.Errorf("%q matches %q, want none", c.pattern, n)
			}
		}
	}
}

// Many ** segments against a deep path cost a table, not a search that
// doubles with each of them.
func TestMatchManyDoubleStars(t *testing.T) {
	p, err := Parse(strings.Repeat("**/", 60) + "z")
	if err != nil {
		t.Fatal(err)
	}
	if p.Match(strings.Repeat("a/", 200) + "y") {
		t.Fatal("matched a path that does not end in z")
	}
}

func TestPrefix(t *testing.T) {
	for pattern, want := range map[string]string{
		"dist/*.tar.gz":           "dist",
		"reports/**/*.xml":        "reports",
		"**/*.xml":                "",
		"*.log":                   "",
		"a/b/c.txt":               "a/b/c.txt",
		".podium/artifacts/**":    ".podium/artifacts",
		"build/out/[ab]/x":        "build/out",
		`quoted/\*/x`:             "quoted",
		"dist/?":                  "dist",
		".podium/artifacts/*.xml": ".podium/artifacts",
	} {
		p, err := Parse(pattern)
		if err != nil {
			t.Fatalf("Parse(%q): %v", pattern, err)
		}
		if got := p.Prefix(); got != want {
			t.Errorf("Prefix of %q is %q, want %q", pattern, got, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for pattern, want := range map[string]string{
		"":                        "empty",
		"/workspace/dist/*.tgz":   "write dist/*.tgz",
		"/etc/*":                  "is absolute",
		"../x":                    `".." segment`,
		"dist/../../etc":          `".." segment`,
		"./dist/*":                `"." path segment`,
		"dist//x":                 "empty or",
		"dist/":                   "dir/** takes everything",
		"a**b/x":                  "** inside a path segment",
		"dist/[ab":                `"[" is not closed`,
		`dist/x\`:                 `"\" ends a segment`,
		"a\nb":                    "control character",
		"\xff":                    "UTF-8",
		strings.Repeat("a", 1025): "more than 1024",
	} {
		_, err := Parse(pattern)
		if err == nil {
			t.Errorf("Parse(%q) accepted it", pattern)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want it to say %q", pattern, err, want)
		}
	}
}
