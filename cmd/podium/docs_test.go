package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// invocation is the word podium as a command in a doc: at the start of a
// code span or line, or after a shell's $, |, &&, ;, ( or a space, followed
// by what it is given.
var invocation = regexp.MustCompile(`(?:^|[\s$|;&(])podium((?: +[^\s|;&)#]+)*)`)

// codeSpans are the inline code spans of a paragraph (a span may run over a
// line break, which counts as a space).
func codeSpans(paragraph string) []string {
	var out []string
	parts := strings.Split(strings.ReplaceAll(paragraph, "\n", " "), "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// code is a piece of a doc shown as code, and the line it starts on.
type code struct {
	text string
	line int
}

// codeOf is everything a Markdown file shows as code: each line of a fenced
// block, and each inline span of the other paragraphs.
func codeOf(t *testing.T, file string) []code {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []code
	var para []string
	start := 0
	flush := func() {
		for _, s := range codeSpans(strings.Join(para, "\n")) {
			out = append(out, code{s, start})
		}
		para = nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			flush()
			fenced = !fenced
		case fenced:
			out = append(out, code{line, n})
		case strings.TrimSpace(line) == "":
			flush()
		default:
			if len(para) == 0 {
				start = n
			}
			para = append(para, line)
		}
	}
	flush()
	return out
}

// Every podium command README.md and docs/ show exists, with every flag
// they give it: a command that is renamed or removed (podium get, podium
// task ID) cannot stay documented. Each is looked up as podium itself does,
// and each --flag checked against that command's own help and the global
// flags.
func TestEveryDocumentedCommandExists(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	// docs/cli.md is the commands' own help, generated (reference_test.go):
	// its code blocks are help text, prose included, not invocations.
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "cli.md" })
	files = append(files, "../../README.md")
	help := map[string]string{}
	helpOf := func(cmd *command) string {
		if h, ok := help[cmd.name]; ok {
			return h
		}
		tc := newTestCLI(nil)
		tc.run(t, append(strings.Fields(cmd.name), "--help")...)
		top := newTestCLI(nil)
		top.run(t, "--help")
		help[cmd.name] = tc.out.String() + tc.errOut.String() + top.out.String()
		return help[cmd.name]
	}
	checked := 0
	for _, file := range files {
		for _, c := range codeOf(t, file) {
			for _, m := range invocation.FindAllStringSubmatch(c.text, -1) {
				words := strings.Fields(m[1])
				if len(words) == 0 || !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(words[0]) {
					continue // "podium" alone, or a path, a version, a placeholder
				}
				cmd, used := lookup(words)
				if cmd == nil && len(words) > 1 && strings.Contains(words[1], "…") && isGroup(words[0]) {
					continue // "podium user …": the group's commands
				}
				if cmd == nil {
					t.Errorf("%s:%d: `podium %s` names no command (podium help lists them)", file, c.line, strings.Join(words, " "))
					continue
				}
				checked++
				for _, w := range words[used:] {
					if w == "--" {
						break // what follows is the task's command
					}
					if !strings.HasPrefix(w, "-") || w == "-" {
						continue
					}
					flag := strings.SplitN(strings.Trim(w, ",.;:'\""), "=", 2)[0]
					if flag == "" || strings.ContainsAny(flag, "…[]") {
						continue
					}
					if !regexp.MustCompile(`(^|[\s,])` + regexp.QuoteMeta(flag) + `([\s,=]|$)`).MatchString(helpOf(cmd)) {
						t.Errorf("%s:%d: `podium %s` has no flag %s (podium help %s lists its flags)", file, c.line, cmd.name, flag, cmd.name)
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d podium commands found in the docs; the scan is broken", checked)
	}
}

// isGroup reports whether word starts some command's two-word name.
func isGroup(word string) bool {
	for _, cmd := range commands {
		if strings.HasPrefix(cmd.name, word+" ") {
			return true
		}
	}
	return false
}
