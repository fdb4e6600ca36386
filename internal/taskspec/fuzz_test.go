package taskspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// seedFiles are spec files to start fuzzing from: examples/, the package
// doc's example, and a few that are refused in different ways.
func seedFiles(f *testing.F) []string {
	f.Helper()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	var out []string
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, string(b))
	}
	return append(out,
		"image: alpine:3\ncommand: [sh, -c, 'echo hi']\n",
		"image: a\nenv: {A: 1, B: \"\", C: ~}\nlabels: [x, y=z]\ntimeout: 10m\ncancel_grace: 8760h\n",
		"image: a\nresources: {cpu: 0.5, memory_mb: 1024, pids: 1e3}\n",
		"image: a\nsidecars:\n  - name: db\n    image: postgres:16\n    readiness: {tcp_port: 5432, timeout: 60s}\n",
		"image: a\ncommand: [sh, ~, x]\n",
		"image: a\nartifacts: [\"**/*.xml\", dist/*.tar.gz]\ncapabilities: [cap_chown, NET_RAW]\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nimage: x\ncommand: *b\n",
		"image: BusyBox:Latest\n",
		"image: a\ntimeout: 10\n",
		"image: a\n---\nimage: b\n",
		"",
	)
}

// FuzzParse feeds Parse what a person (or a script) might pass as --spec.
// Whatever the bytes, Parse and Validate must not panic and Parse must
// answer in time linear in the file (the fuzzer's own timeout catches a
// quadratic case); a spec that passes Validate must be one the API takes
// unchanged: it encodes (every string is UTF-8), within MaxSpecBytes, and
// validates again to the same thing.
func FuzzParse(f *testing.F) {
	for _, s := range seedFiles(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		spec, err := Parse(strings.NewReader(file))
		if err != nil {
			if spec != nil {
				t.Fatalf("Parse failed (%v) but returned a spec", err)
			}
			if !utf8.ValidString(err.Error()) && utf8.ValidString(file) {
				t.Fatalf("Parse's error is not UTF-8: %q", err)
			}
			return
		}
		checkValidated(t, spec)
	})
}

// FuzzValidate feeds Validate any spec the API can decode, which is what
// reaches it from a client that is not the CLI.
func FuzzValidate(f *testing.F) {
	for _, s := range seedFiles(f) {
		spec, err := Parse(strings.NewReader(s))
		if err != nil {
			continue
		}
		b, err := proto.Marshal(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, spec := range []*podiumv1.TaskSpec{
		good(),
		{Image: "a", TimeoutSeconds: 1e10, CancelGraceSeconds: -1},
		{Image: "a", Env: map[string]string{"A=B": "x"}, Labels: []string{"a=b=c"}},
		{Image: "a", Sidecars: []*podiumv1.Sidecar{{Name: "task", Image: "b", Readiness: &podiumv1.Readiness{HttpPort: 80}}}},
		{Image: "a", Resources: &podiumv1.Resources{Cpu: 1e300, MemoryMb: -1}},
	} {
		b, err := proto.Marshal(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec podiumv1.TaskSpec
		if proto.Unmarshal(data, &spec) != nil {
			return
		}
		if proto.Size(&spec) > MaxSpecBytes {
			// The coordinator's request limit keeps these out before
			// Validate; Validate refuses them too.
			if Validate(&spec) == nil {
				t.Fatalf("a spec of %d bytes was accepted", proto.Size(&spec))
			}
			return
		}
		if Validate(&spec) != nil {
			return
		}
		checkValidated(t, &spec)
	})
}

// checkValidated checks what every spec Validate accepts must be.
func checkValidated(t *testing.T, spec *podiumv1.TaskSpec) {
	t.Helper()
	if err := Validate(spec); err != nil {
		return
	}
	b, err := proto.Marshal(spec)
	if err != nil {
		t.Fatalf("a valid spec does not encode: %v", err)
	}
	if len(b) > MaxSpecBytes {
		t.Fatalf("a valid spec is %d bytes", len(b))
	}
	again := proto.Clone(spec).(*podiumv1.TaskSpec)
	if err := Validate(again); err != nil || !proto.Equal(again, spec) {
		t.Fatalf("validating a valid spec again gave %v and %v, want nil and the same spec", err, again)
	}
	if len(spec.GetEnv()) > MaxEnv || len(spec.GetLabels()) > MaxLabels || len(spec.GetSidecars()) > MaxSidecars {
		t.Fatalf("a valid spec is past a count limit: %d env, %d labels, %d sidecars", len(spec.GetEnv()), len(spec.GetLabels()), len(spec.GetSidecars()))
	}
	for _, d := range []int64{spec.GetTimeoutSeconds(), spec.GetCancelGraceSeconds()} {
		if d < 0 || d > MaxDurationSeconds || Seconds(d).Seconds() != float64(d) {
			t.Fatalf("a valid spec has a duration of %d s, which is %v on a node", d, Seconds(d))
		}
	}
	commands := [][]string{spec.GetCommand()}
	for _, sc := range spec.GetSidecars() {
		commands = append(commands, sc.GetCommand(), sc.GetReadiness().GetCommand())
		if d := sc.GetReadiness().GetTimeoutSeconds(); d < 0 || d > MaxDurationSeconds {
			t.Fatalf("a valid spec has a readiness timeout of %d s", d)
		}
	}
	for _, c := range commands {
		total := 0
		for _, a := range c {
			if len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("a valid spec has an argument of %d bytes that no process can start with", len(a))
			}
			total += len(a)
		}
		if total > MaxCommandBytes {
			t.Fatalf("a valid spec has a command of %d bytes", total)
		}
	}
	if _, err := ArtifactGlobs("spec.artifacts", spec.GetArtifacts()); err != nil {
		t.Fatalf("a valid spec's artifacts do not parse: %v", err)
	}
}
