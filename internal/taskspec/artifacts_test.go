package taskspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The artifacts key of a spec file is a list of patterns, kept as written.
func TestParseArtifacts(t *testing.T) {
	const file = `image: alpine:3
artifacts:
  - dist/*.tar.gz
  - "reports/**/*.xml"
  - '**/junit.xml'
  - .podium/artifacts/**
`
	got, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := &podiumv1.TaskSpec{Image: "alpine:3", Artifacts: []string{"dist/*.tar.gz", "reports/**/*.xml", "**/junit.xml", ".podium/artifacts/**"}}
	if !proto.Equal(got, want) {
		t.Fatalf("Parse = %v, want %v", got, want)
	}
	if err := Validate(got); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("Validate changed the patterns: %v", got)
	}
}

func TestParseRejectsArtifacts(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"a string, not a list", "image: a\nartifacts: dist/*\n", []string{"line 2", "artifacts: want a list of strings", `e.g. ["dist/*.tar.gz"]`}},
		{"a mapping in the list", "image: a\nartifacts: [dist/*, {a: b}]\n", []string{"line 2", "artifacts[1]: want a string, got a mapping"}},
		{"misspelt key", "image: a\nartifact: [dist/*]\n", []string{"line 2", `unknown key "artifact"`, `did you mean "artifacts"`}},
		{"unquoted * in a flow list", "image: a\nartifacts: [**/*.xml]\n", []string{"line 2", `must be quoted, as in ["**/*.xml"]`}},
		{"unquoted * in a block list", "image: a\nartifacts:\n  - dist/*\n  - *.xml\n", []string{"line 4", "must be quoted"}},
		{"empty item", "image: a\nartifacts: [dist/*, ~]\n", []string{"line 2", "artifacts[1]: empty list item"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

func TestValidateArtifacts(t *testing.T) {
	for _, globs := range [][]string{
		nil,
		{".podium/artifacts/*.xml"},
		{"dist/*.tar.gz", "reports/**/*.xml", ".podium/artifacts/**"},
		{"**"},
		{"out/report.txt", "out/report.txt"},
	} {
		if err := Validate(&podiumv1.TaskSpec{Image: "a", Artifacts: globs}); err != nil {
			t.Errorf("Validate with artifacts %q: %v", globs, err)
		}
	}
	for _, tc := range []struct {
		name    string
		globs   []string
		field   string
		problem string
	}{
		{"empty", []string{"dist/*", ""}, "spec.artifacts[1]", "empty: give a path relative to /workspace"},
		{"absolute", []string{"/etc/passwd"}, "spec.artifacts[0]", "is absolute"},
		{"absolute in the workspace", []string{"ok/*", "x/*", "/workspace/dist/*.tar.gz"}, "spec.artifacts[2]", "write dist/*.tar.gz"},
		{"..", []string{"../etc/*"}, "spec.artifacts[0]", `".." segment`},
		{".. inside", []string{"dist/../../x"}, "spec.artifacts[0]", `".." segment`},
		{"bad pattern", []string{"dist/[a-"}, "spec.artifacts[0]", "not a valid pattern"},
		{"** in a segment", []string{"dist/a**"}, "spec.artifacts[0]", "** stands alone"},
		{"trailing slash", []string{"dist/"}, "spec.artifacts[0]", "dir/** takes everything under dir"},
		{"too many", manyGlobs(MaxArtifactGlobs + 1), "spec.artifacts", "more than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(&podiumv1.TaskSpec{Image: "a", Artifacts: tc.globs})
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

// An empty field is the default, every file in /workspace/.podium/artifacts.
func TestArtifactGlobsDefault(t *testing.T) {
	ps, err := ArtifactGlobs("spec.artifacts", nil)
	if err != nil || len(ps) != 1 || ps[0].String() != DefaultArtifactGlob {
		t.Fatalf("ArtifactGlobs(nil) = %v, %v; want [%s]", ps, err, DefaultArtifactGlob)
	}
	if !ps[0].Match(".podium/artifacts/reports/junit.xml") || ps[0].Match("dist/a.tar.gz") {
		t.Fatalf("the default pattern matches the wrong files")
	}
}

func manyGlobs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dir%d/*", i)
	}
	return out
}
