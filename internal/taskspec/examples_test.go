package taskspec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestExamples parses and validates every spec in examples/ at the top of the
// repository, so that an example can never drift from the format it shows.
func TestExamples(t *testing.T) {
	const dir = "../../examples"
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatalf("examples/README.md: %v", err)
	}
	var names []string
	for _, f := range files {
		name := filepath.Base(f)
		names = append(names, name)
		t.Run(name, func(t *testing.T) {
			r, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			spec, err := Parse(r)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := Validate(spec); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !strings.Contains(string(readme), "`"+name+"`") {
				t.Errorf("examples/README.md does not mention %s", name)
			}
			// A sidecar is only worth showing if the task uses it: its
			// name must appear in the task's command or environment.
			for _, sc := range spec.GetSidecars() {
				used := slices.ContainsFunc(spec.GetCommand(), func(a string) bool { return strings.Contains(a, sc.GetName()) })
				for _, v := range spec.GetEnv() {
					used = used || v == sc.GetName()
				}
				if !used {
					t.Errorf("sidecar %q is never reached by the task", sc.GetName())
				}
			}
		})
	}
	// Renaming or losing a file must not quietly shrink what is checked.
	for _, want := range []string{"artifacts.yaml", "build.yaml", "dind-build.yaml", "hello.yaml", "interactive.yaml", "with-postgres.yaml"} {
		if !slices.Contains(names, want) {
			t.Errorf("examples/%s is missing (found %q)", want, names)
		}
	}
}
