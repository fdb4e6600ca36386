package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// referencePath is the CLI reference, generated from the commands' own help.
const referencePath = "../../docs/cli.md"

// cliReference is docs/cli.md: podium help, then every command's help (its
// synopsis, what it does and its flags, from its flag set), as the binary
// prints them.
func cliReference(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("# The podium CLI reference\n\n")
	b.WriteString("Generated from the commands' own help by `make docs`; a test fails when it is stale.\n")
	b.WriteString("`podium help COMMAND` (or `podium COMMAND --help`) prints the same.\n\n")
	help := func(args ...string) string {
		tc := newTestCLI(nil)
		if code := tc.run(t, args...); code != 0 {
			t.Fatalf("podium %s: exit %d: %s", strings.Join(args, " "), code, tc.errOut)
		}
		return strings.TrimRight(tc.out.String(), "\n")
	}
	b.WriteString("## Contents\n\n")
	for _, cmd := range commands {
		fmt.Fprintf(&b, "- [podium %s](#podium-%s): %s\n", cmd.name, strings.ReplaceAll(cmd.name, " ", "-"), cmd.summary)
	}
	fmt.Fprintf(&b, "\n## podium\n\n```text\n%s\n```\n", help("help"))
	for _, cmd := range commands {
		if cmd == helpCommand {
			continue
		}
		fmt.Fprintf(&b, "\n## podium %s\n\n```text\n%s\n```\n", cmd.name, help(append(strings.Fields(cmd.name), "--help")...))
	}
	return b.String()
}

// docs/cli.md is what the commands' help says now: regenerate it with
// `make docs` (PODIUM_UPDATE_DOCS=1 for this test) after changing a command.
func TestCLIReferenceIsCurrent(t *testing.T) {
	want := cliReference(t)
	if os.Getenv("PODIUM_UPDATE_DOCS") != "" {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referencePath)
	if err != nil || string(got) != want {
		t.Fatalf("%s is stale (%v): run make docs and commit it", referencePath, err)
	}
}
