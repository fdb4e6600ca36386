package taskspec

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func TestParseFullSpec(t *testing.T) {
	const file = `# every key, once
image: alpine:3
command: [sh, -c, 'echo hi; exit 3']
env:
  GREETING: hello
  EMPTY: ""
  NUMBER: 42
  spring.profiles.active: prod
working_dir: /workspace
labels: [linux, gpu=a100]
resources:
  cpu: 0.5
  memory_mb: 512
  pids: 256
timeout: 1h30m
priority: -5
max_attempts: 3
retry_on_node_loss: true
cancel_grace: 45s
capabilities: [NET_BIND_SERVICE, cap_chown]
artifacts: [dist/*.tar.gz, "**/junit.xml"]
user: "1000:1000"
sidecars:
  - name: db
    image: postgres:16
    command: [postgres, -c, fsync=off]
    env:
      POSTGRES_PASSWORD: test
    resources:
      cpu: 1
      memory_mb: 256
      pids: 100
    readiness:
      command: [pg_isready, -U, postgres]
      timeout: 2m
  - name: api
    image: example/api:1
    readiness: {http_path: /healthz, http_port: 8080}
  - name: cache
    image: redis:7
    readiness:
      tcp_port: 6379
  - name: plain
    image: busybox:1
`
	got, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &podiumv1.TaskSpec{
		Image:              "alpine:3",
		Command:            []string{"sh", "-c", "echo hi; exit 3"},
		Env:                map[string]string{"GREETING": "hello", "EMPTY": "", "NUMBER": "42", "spring.profiles.active": "prod"},
		WorkingDir:         "/workspace",
		Labels:             []string{"linux", "gpu=a100"},
		Resources:          &podiumv1.Resources{Cpu: 0.5, MemoryMb: 512, Pids: 256},
		TimeoutSeconds:     5400,
		Priority:           -5,
		MaxAttempts:        3,
		RetryOnNodeLoss:    true,
		CancelGraceSeconds: 45,
		Capabilities:       []string{"NET_BIND_SERVICE", "cap_chown"},
		Artifacts:          []string{"dist/*.tar.gz", "**/junit.xml"},
		User:               "1000:1000",
		Sidecars: []*podiumv1.Sidecar{
			{
				Name:      "db",
				Image:     "postgres:16",
				Command:   []string{"postgres", "-c", "fsync=off"},
				Env:       map[string]string{"POSTGRES_PASSWORD": "test"},
				Resources: &podiumv1.Resources{Cpu: 1, MemoryMb: 256, Pids: 100},
				Readiness: &podiumv1.Readiness{Command: []string{"pg_isready", "-U", "postgres"}, TimeoutSeconds: 120},
			},
			{Name: "api", Image: "example/api:1", Readiness: &podiumv1.Readiness{HttpPath: "/healthz", HttpPort: 8080}},
			{Name: "cache", Image: "redis:7", Readiness: &podiumv1.Readiness{TcpPort: 6379}},
			{Name: "plain", Image: "busybox:1"},
		},
	}
	if !proto.Equal(got, want) {
		t.Errorf("Parse:\n got %v\nwant %v", got, want)
	}
	if err := Validate(got); err != nil {
		t.Errorf("Validate of a full, good spec: %v", err)
	}
	// Parse keeps what was written; Validate makes it canonical.
	if want := []string{"NET_BIND_SERVICE", "CHOWN"}; !slices.Equal(got.Capabilities, want) {
		t.Errorf("capabilities after Validate = %q, want %q", got.Capabilities, want)
	}
}

func TestParseMinimalAndNulls(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       *podiumv1.TaskSpec
	}{
		{"image only", "image: alpine:3\n", &podiumv1.TaskSpec{Image: "alpine:3"}},
		{"no image (a flag may give it)", "command: [true]\n", &podiumv1.TaskSpec{Command: []string{"true"}}},
		{"null durations", "image: a\ntimeout:\ncancel_grace: ~\n", &podiumv1.TaskSpec{Image: "a"}},
		{"zero duration", "image: a\ntimeout: 0\n", &podiumv1.TaskSpec{Image: "a"}},
		{"flow style", "{image: a, resources: {cpu: 2}}", &podiumv1.TaskSpec{Image: "a", Resources: &podiumv1.Resources{Cpu: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.file))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.file, err)
			}
			if !proto.Equal(got, tc.want) {
				t.Errorf("Parse(%q) = %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		// every string must appear in the error
		want []string
	}{
		{"unknown top-level key", "image: a\nimgae: b\n", []string{"line 2", `unknown key "imgae"`, `did you mean "image"`}},
		{"unknown nested key", "image: a\nresources:\n  cpu: 1\n  disk_mb: 1\n", []string{"line 4", `unknown key "resources.disk_mb"`,
			"cpu, memory_mb, pids, gpus, gpu_model, gpu_memory_mb"}},
		{"unknown key, nothing close", "image: a\nzzzzzzzz: 1\n", []string{"line 2", `unknown key "zzzzzzzz"`, "a task spec takes image"}},
		{"several problems at once", "imag: a\nfoo: b\n", []string{"2 problems", "line 1", "line 2", `"imag"`, `"foo"`}},
		{"command as a string", "image: a\ncommand: echo hi\n", []string{"line 2", "command: want a list of strings", `"echo hi"`, "[sh, -c,"}},
		{"env as a list", "image: a\nenv:\n  - A=1\n", []string{"line 3", "env: want a mapping"}},
		{"cpu not a number", "image: a\nresources:\n  cpu: lots\n", []string{"line 3", "resources.cpu: want a number", `"lots"`}},
		{"memory not an integer", "image: a\nresources:\n  memory_mb: 1.5\n", []string{"line 3", "resources.memory_mb: want a whole number, got 1.5"}},
		{"max_attempts a string", "image: a\nmax_attempts: three\n", []string{"line 2", `max_attempts: want a whole number, got "three"`}},
		{"pids a list", "image: a\nresources: {pids: [1]}\n", []string{"line 2", "want a whole number, got a list"}},
		{"priority overflows int32", "image: a\npriority: 99999999999\n", []string{"line 2", "priority: want a whole number that fits in 32 bits"}},
		{"bool not a bool", "image: a\nretry_on_node_loss: maybe\n", []string{"line 2", "retry_on_node_loss: want true or false"}},
		{"image as a list", "image: [a]\n", []string{"line 1", "image: want a string, got a list"}},
		{"resources as a scalar", "image: a\nresources: 4\n", []string{"line 2", "resources: want a mapping with cpu"}},
		{"timeout without unit", "image: a\ntimeout: 600\n", []string{"line 2", "timeout:", "has no unit", `"600s"`}},
		{"timeout not a duration", "image: a\ntimeout: soon\n", []string{"line 2", "timeout:", "not a duration"}},
		{"timeout negative", "image: a\ntimeout: -5s\n", []string{"line 2", "timeout:", "negative"}},
		{"timeout sub-second", "image: a\ntimeout: 1500ms\n", []string{"line 2", "timeout:", "whole number of seconds", `"2s"`}},
		{"timeout as a list", "image: a\ntimeout: [1m]\n", []string{"line 2", "timeout: want a duration", "got a list"}},
		{"cancel_grace without unit", "image: a\ncancel_grace: 30\n", []string{"line 2", "cancel_grace:", "has no unit"}},
		{"duplicate key", "image: a\nimage: b\n", []string{"line 2", `key "image" appears again (first at line 1)`}},
		{"not a mapping", "- image: a\n", []string{"line 1", "a task spec is a YAML mapping", "got a list"}},
		{"scalar document", "alpine:3\n", []string{"a task spec is a YAML mapping"}},
		{"two documents", "image: a\n---\nimage: b\n", []string{"line 2", "second YAML document"}},
		{"syntax error", "image: a\n  b: c\n", []string{"line 2", "mapping values are not allowed"}},
		{"unclosed list", "image: a\ncommand: [a\n", []string{"task spec: line"}},
		{"empty file", "", []string{"task spec is empty", "image: alpine:3"}},
		{"only comments", "# nothing\n", []string{"task spec is empty"}},
		{"tabs", "image: a\n\tcommand: [b]\n", []string{"task spec: line"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.file, tc.want) })
	}
}

func TestParseRejectsHugeFile(t *testing.T) {
	file := "image: a\n# " + strings.Repeat("x", MaxFileBytes) + "\n"
	if _, err := Parse(strings.NewReader(file)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Parse of a %d-byte file: err = %v, want a size error", len(file), err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestParseReadError(t *testing.T) {
	if _, err := Parse(failingReader{}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Parse of a failing reader: err = %v, want the read error", err)
	}
}

func TestParseSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"1s", 1, ""},
		{"90s", 90, ""},
		{"10m", 600, ""},
		{"1h30m", 5400, ""},
		{" 2m ", 120, ""},
		{"1000ms", 1, ""},
		{"10", 0, "has no unit"},
		{"1.5", 0, "has no unit"},
		{"-1", 0, "has no unit"},
		{"", 0, "not a duration"},
		{"soon", 0, "not a duration"},
		{"-1s", 0, "negative"},
		{"1.5s", 0, "whole number of seconds"},
		{"999ms", 0, "whole number of seconds"},
	} {
		got, err := ParseSeconds(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseSeconds(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSeconds(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("ParseSeconds(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		in, key, value string
		err            string
	}{
		{"FOO=bar", "FOO", "bar", ""},
		{"FOO=", "FOO", "", ""},
		{"FOO=a=b", "FOO", "a=b", ""},
		{"FOO= spaced value ", "FOO", " spaced value ", ""},
		{"a.b-c=1", "a.b-c", "1", ""},
		{"FOO", "", "", `--env "FOO": want KEY=VALUE`},
		{"", "", "", `--env "": want KEY=VALUE`},
		{"=bar", "", "", "empty variable name"},
		{"MY VAR=1", "", "", "space, control or non-ASCII"},
		{"CAFÉ=1", "", "", "non-ASCII"},
		{"A\tB=1", "", "", "control"},
		{"A=x\x00y", "", "", "NUL"},
	} {
		k, v, err := ParseEnv(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseEnv(%q) = %q, %q, %v; want an error containing %q", tc.in, k, v, err, tc.err)
			}
			continue
		}
		if err != nil || k != tc.key || v != tc.value {
			t.Errorf("ParseEnv(%q) = %q, %q, %v; want %q, %q", tc.in, k, v, err, tc.key, tc.value)
		}
	}
}

func good() *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{
		Image:      "alpine:3",
		Command:    []string{"sh", "-c", "echo hi"},
		Env:        map[string]string{"A": "1"},
		WorkingDir: "/workspace",
		Labels:     []string{"linux", "zone=eu-west/1", "a.b_c-d"},
		Resources:  &podiumv1.Resources{Cpu: 0.5, MemoryMb: 64, Pids: 10},
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*podiumv1.TaskSpec)
	}{
		{"good", func(*podiumv1.TaskSpec) {}},
		{"image only", func(s *podiumv1.TaskSpec) { *s = podiumv1.TaskSpec{Image: "alpine:3"} }},
		{"image with registry and digest", func(s *podiumv1.TaskSpec) {
			s.Image = "registry.example.com:5000/team/app@sha256:" + strings.Repeat("0123456789abcdef", 4)
		}},
		{"zero resources", func(s *podiumv1.TaskSpec) { s.Resources = &podiumv1.Resources{} }},
		{"negative priority", func(s *podiumv1.TaskSpec) { s.Priority = math.MinInt32 }},
		{"max priority", func(s *podiumv1.TaskSpec) { s.Priority = math.MaxInt32 }},
		{"empty env value", func(s *podiumv1.TaskSpec) { s.Env["EMPTY"] = "" }},
		{"env key with dots", func(s *podiumv1.TaskSpec) { s.Env["spring.profiles.active"] = "x" }},
		{"empty command argument", func(s *podiumv1.TaskSpec) { s.Command = []string{"printf", ""} }},
		{"timeouts and attempts", func(s *podiumv1.TaskSpec) {
			s.TimeoutSeconds, s.CancelGraceSeconds, s.MaxAttempts = 60, 5, 3
		}},
		{"user as a UID", func(s *podiumv1.TaskSpec) { s.User = "65534" }},
		{"user as UID:GID", func(s *podiumv1.TaskSpec) { s.User = "1000:100" }},
		{"user as a name", func(s *podiumv1.TaskSpec) { s.User = "nobody" }},
		{"root, asked for", func(s *podiumv1.TaskSpec) { s.User = "0" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mutate(s)
			if err := Validate(s); err != nil {
				t.Errorf("Validate(%v) = %v, want nil", s, err)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*podiumv1.TaskSpec)
		field   string
		problem string
	}{
		{"missing image", func(s *podiumv1.TaskSpec) { s.Image = "" }, "spec.image", "required: name the container image to run, e.g. alpine:3"},
		{"image with a space", func(s *podiumv1.TaskSpec) { s.Image = "alpine 3" }, "spec.image", "space or control"},
		{"image with a newline", func(s *podiumv1.TaskSpec) { s.Image = "alpine:3\n" }, "spec.image", "space or control"},
		{"NUL in command", func(s *podiumv1.TaskSpec) { s.Command = []string{"a", "b\x00"} }, "spec.command[1]", "NUL"},
		{"empty env key", func(s *podiumv1.TaskSpec) { s.Env[""] = "x" }, `spec.env[""]`, "empty variable name"},
		{"env key with a space", func(s *podiumv1.TaskSpec) { s.Env["MY VAR"] = "x" }, `spec.env["MY VAR"]`, "space"},
		{"env key with =", func(s *podiumv1.TaskSpec) { s.Env["A=B"] = "x" }, `spec.env["A=B"]`, "'='"},
		{"env key non-ASCII", func(s *podiumv1.TaskSpec) { s.Env["ÄPFEL"] = "x" }, `spec.env["ÄPFEL"]`, "non-ASCII"},
		{"env value with NUL", func(s *podiumv1.TaskSpec) { s.Env["A"] = "x\x00" }, `spec.env["A"]`, "NUL"},
		{"relative working_dir", func(s *podiumv1.TaskSpec) { s.WorkingDir = "work" }, "spec.working_dir", "absolute"},
		{"NUL in working_dir", func(s *podiumv1.TaskSpec) { s.WorkingDir = "/w\x00" }, "spec.working_dir", "NUL"},
		{"empty label", func(s *podiumv1.TaskSpec) { s.Labels = []string{"ok", ""} }, "spec.labels[1]", "no key"},
		{"label without key", func(s *podiumv1.TaskSpec) { s.Labels = []string{"=x"} }, "spec.labels[0]", "no key"},
		{"label with empty value", func(s *podiumv1.TaskSpec) { s.Labels = []string{"gpu="} }, "spec.labels[0]", "empty value"},
		{"label key with a space", func(s *podiumv1.TaskSpec) { s.Labels = []string{"my label"} }, "spec.labels[0]", "key may use only"},
		{"label key with a colon", func(s *podiumv1.TaskSpec) { s.Labels = []string{"a:b"} }, "spec.labels[0]", "key may use only"},
		{"label value with a comma", func(s *podiumv1.TaskSpec) { s.Labels = []string{"gpu=a,b"} }, "spec.labels[0]", "value may use only"},
		{"label with two =", func(s *podiumv1.TaskSpec) { s.Labels = []string{"a=b=c"} }, "spec.labels[0]", "value may use only"},
		{"negative cpu", func(s *podiumv1.TaskSpec) { s.Resources.Cpu = -1 }, "spec.resources.cpu", "0 (no limit) or more"},
		{"NaN cpu", func(s *podiumv1.TaskSpec) { s.Resources.Cpu = math.NaN() }, "spec.resources.cpu", "not a number of cores"},
		{"infinite cpu", func(s *podiumv1.TaskSpec) { s.Resources.Cpu = math.Inf(1) }, "spec.resources.cpu", "not a number of cores"},
		{"negative memory", func(s *podiumv1.TaskSpec) { s.Resources.MemoryMb = -1 }, "spec.resources.memory_mb", "negative"},
		{"negative pids", func(s *podiumv1.TaskSpec) { s.Resources.Pids = -1 }, "spec.resources.pids", "negative"},
		{"negative timeout", func(s *podiumv1.TaskSpec) { s.TimeoutSeconds = -1 }, "spec.timeout_seconds", "negative"},
		{"negative max_attempts", func(s *podiumv1.TaskSpec) { s.MaxAttempts = -1 }, "spec.max_attempts", "negative"},
		{"negative cancel grace", func(s *podiumv1.TaskSpec) { s.CancelGraceSeconds = -1 }, "spec.cancel_grace_seconds", "negative"},
		{"user with a group name", func(s *podiumv1.TaskSpec) { s.User = "www-data:www-data" }, "spec.user", "is not a user"},
		{"user with a space", func(s *podiumv1.TaskSpec) { s.User = "1000 " }, "spec.user", "UID:GID pair (1000:1000)"},
		{"user -1", func(s *podiumv1.TaskSpec) { s.User = "4294967295" }, "spec.user", "is not a user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mutate(s)
			err := Validate(s)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate(%v) = %v, want a *FieldError", s, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = {Field: %q, Problem: %q}, want field %q and a problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
			if want := fe.Field + ": " + fe.Problem; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	var fe *FieldError
	if err := Validate(nil); !errors.As(err, &fe) || fe.Field != "spec" {
		t.Fatalf("Validate(nil) = %v, want a *FieldError for spec", err)
	}
}

func TestValidateMissingImageMessage(t *testing.T) {
	// The CLI and the coordinator both show this sentence as is.
	err := Validate(&podiumv1.TaskSpec{})
	const want = "spec.image: required: name the container image to run, e.g. alpine:3"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate(empty) = %v, want %q", err, want)
	}
}

func TestValidateReportsEnvKeysInOrder(t *testing.T) {
	// The same bad spec must always produce the same message, whatever the
	// map's iteration order.
	s := &podiumv1.TaskSpec{Image: "a", Env: map[string]string{"Z Z": "", "B B": "", "M M": ""}}
	for range 20 {
		if err := Validate(s); err == nil || !strings.Contains(err.Error(), `"B B"`) {
			t.Fatalf("Validate = %v, want the first key in sorted order", err)
		}
	}
}

func TestLabelProblem(t *testing.T) {
	for l, ok := range map[string]bool{
		"linux": true, "gpu=a100": true, "zone=eu/1": true, "a_b.c-d": true,
		"": false, "=": false, "a=": false, "=a": false, "a b": false, "é": false, "a=b=c": false,
	} {
		if got := LabelProblem(l) == ""; got != ok {
			t.Errorf("LabelProblem(%q) = %q, want ok=%v", l, LabelProblem(l), ok)
		}
	}
}

// wantParseError checks that Parse refuses file with an error containing
// every one of want.
func wantParseError(t *testing.T, file string, want []string) {
	t.Helper()
	spec, err := Parse(strings.NewReader(file))
	if err == nil {
		t.Fatalf("Parse(%q) = %v, want an error", file, spec)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Parse(%q) error\n  %v\nshould contain %q", file, err, w)
		}
	}
}

func TestUserProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		user string
		ok   bool
	}{
		{"0", true}, {"65534", true}, {"1000:1000", true}, {"4294967294:0", true},
		{"nobody", true}, {"_apt", true}, {"build-user", true}, {"user1", true}, {strings.Repeat("a", 32), true},
		{"", false}, {":", false}, {"1000:", false}, {":1000", false}, {"1000:1000:1000", false},
		{"4294967295", false}, {"99999999999", false}, {"-1", false}, {"+1", false}, {"0x10", false},
		{"Root", false}, {"1user", false}, {"-user", false}, {"user name", false}, {"user\n", false},
		{"nobody:nogroup", false}, {"nobody:100", false}, {"..", false}, {"user/x", false}, {strings.Repeat("a", 33), false},
	} {
		if got := UserProblem(tc.user); (got == "") != tc.ok {
			t.Errorf("UserProblem(%q) = %q, want ok=%v", tc.user, got, tc.ok)
		}
	}
}

// A user written as a bare YAML number is read as the string a person wrote,
// not refused as the wrong type.
func TestParseUserAsANumber(t *testing.T) {
	t.Parallel()
	got, err := Parse(strings.NewReader("image: alpine:3\nuser: 65534\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.GetUser() != "65534" {
		t.Fatalf("user = %q, want \"65534\"", got.GetUser())
	}
}

// A spec's group is read from YAML as it is written, and a name that is
// not one (a space, too long) is refused naming the field and the charset.
func TestGroup(t *testing.T) {
	spec, err := Parse(strings.NewReader("image: alpine:3\ngroup: ml/sweeps\n"))
	if err != nil || spec.GetGroup() != "ml/sweeps" {
		t.Fatalf("parse group: %v, %v", spec.GetGroup(), err)
	}
	if err := Validate(spec); err != nil {
		t.Fatalf("validate group ml/sweeps: %v", err)
	}
	for _, bad := range []string{"ml sweeps", "ml;rm", strings.Repeat("g", MaxGroupBytes+1)} {
		err := Validate(&podiumv1.TaskSpec{Image: "alpine:3", Group: bad})
		if err == nil || !strings.HasPrefix(err.Error(), "spec.group: ") || !strings.Contains(err.Error(), "letters, digits and . _ / -") {
			t.Errorf("group %q: %v, want spec.group refused with the charset", bad, err)
		}
	}
}
