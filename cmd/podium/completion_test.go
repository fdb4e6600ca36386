package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bash script, loaded into a real bash, completes command names, a
// group's commands and a command's own flags (read from its flag set, so a
// flag added to a command is completed without touching the script); the
// zsh script is the same behind zsh's bashcompinit. An unknown shell is a
// usage error.
func TestCompletionInBash(t *testing.T) {
	t.Parallel()
	tc := newTestCLI(nil)
	if code := tc.run(t, "completion", "bash"); code != 0 {
		t.Fatalf("completion bash: exit %d: %s", code, tc.errOut)
	}
	script := filepath.Join(t.TempDir(), "podium.bash")
	if err := os.WriteFile(script, []byte(tc.out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		w := make([]string, len(words))
		for i, s := range words {
			w[i] = "'" + s + "'"
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(w, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _podium; echo "${COMPREPLY[*]}"`
		out, err := exec.Command("bash", "-c", prog, "bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"podium", "ta"}, "task tasks"},
		{[]string{"podium", "task", ""}, "get cancel rerun send"},
		{[]string{"podium", "user", "ro"}, "rotate-token"},
		{[]string{"podium", "run", "--na"}, "--name"},
		{[]string{"podium", "logs", "--t"}, "--tail --token"},
		{[]string{"podium", "task", "get", "--j"}, "--json"},
		{[]string{"podium", "webhook", "test", "--w"}, "--wait"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("completing %q: %q, want %q", c.words, got, c.want)
		}
	}

	tc = newTestCLI(nil)
	if code := tc.run(t, "completion", "zsh"); code != 0 || !strings.Contains(tc.out.String(), "bashcompinit") || !strings.Contains(tc.out.String(), "complete -o default -F _podium podium") {
		t.Errorf("completion zsh: exit %d:\n%s", code, tc.out)
	}
	tc = newTestCLI(nil)
	if code := tc.run(t, "completion", "fish"); code != exitUsage || !strings.Contains(tc.errOut.String(), "bash or zsh") {
		t.Errorf("completion fish: exit %d: %s", code, tc.errOut)
	}
}
