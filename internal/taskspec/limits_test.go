package taskspec

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

func manyEnv(n, valueBytes int) map[string]string {
	env := make(map[string]string, n)
	for i := range n {
		env[fmt.Sprintf("K%04d", i)] = strings.Repeat("v", valueBytes)
	}
	return env
}

func manyLabels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("l%d", i)
	}
	return out
}

func manySidecars(n int) []*podiumv1.Sidecar {
	out := make([]*podiumv1.Sidecar, n)
	for i := range out {
		out[i] = &podiumv1.Sidecar{Name: fmt.Sprintf("s%d", i), Image: "busybox"}
	}
	return out
}

// withUnknownField is s with a field number 99 protobuf does not know, as a
// newer client would send it.
func withUnknownField(m proto.Message) {
	b := protowire.AppendTag(nil, 99, protowire.BytesType)
	b = protowire.AppendString(b, "x")
	m.ProtoReflect().SetUnknown(b)
}

// Each limit at its bound is accepted: a limit refuses only what is past it.
func TestValidateAcceptsLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*podiumv1.TaskSpec)
	}{
		{"256 env entries", func(s *podiumv1.TaskSpec) { s.Env = manyEnv(MaxEnv, 10) }},
		{"a 32 KiB env value and a 256-byte key", func(s *podiumv1.TaskSpec) {
			s.Env = map[string]string{strings.Repeat("K", MaxEnvKeyBytes): strings.Repeat("v", MaxEnvValueBytes)}
		}},
		{"64 labels", func(s *podiumv1.TaskSpec) { s.Labels = manyLabels(MaxLabels) }},
		{"a 128-byte label", func(s *podiumv1.TaskSpec) { s.Labels = []string{strings.Repeat("l", MaxLabelBytes)} }},
		{"a 128-byte name", func(s *podiumv1.TaskSpec) { s.Name = strings.Repeat("n", MaxNameBytes) }},
		{"a name with every allowed sign", func(s *podiumv1.TaskSpec) { s.Name = "9deploy.web_eu-1:v2/canary+1" }},
		{"8 sidecars", func(s *podiumv1.TaskSpec) { s.Sidecars = manySidecars(MaxSidecars) }},
		{"a command of 64 KiB", func(s *podiumv1.TaskSpec) {
			s.Command = []string{"sh", "-c", strings.Repeat("x", MaxCommandBytes-len("sh-c"))}
		}},
		{"durations of a year", func(s *podiumv1.TaskSpec) {
			s.TimeoutSeconds, s.CancelGraceSeconds = MaxDurationSeconds, MaxDurationSeconds
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres:16",
				Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: MaxDurationSeconds}}}
		}},
		{"the largest resources", func(s *podiumv1.TaskSpec) {
			s.Resources = &podiumv1.Resources{Cpu: MaxCPU, MemoryMb: MaxMemoryMB, Pids: MaxPids}
		}},
		{"image references Docker takes", func(s *podiumv1.TaskSpec) {
			s.Image = "Registry.Example.com:5000/team/app:V1.2"
			s.Sidecars = []*podiumv1.Sidecar{
				{Name: "a", Image: "busybox"}, {Name: "b", Image: "library/postgres:16-alpine"},
				{Name: "c", Image: "ghcr.io/org/tool@sha256:" + strings.Repeat("ab", 32)},
				{Name: "d", Image: "localhost/podium-test/busybox:latest"},
			}
		}},
		{"text in every string", func(s *podiumv1.TaskSpec) {
			s.Env["GREETING"] = "grüß dich ✓"
			s.Command = []string{"echo", "日本語"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			tc.mutate(s)
			if err := Validate(s); err != nil {
				t.Errorf("Validate = %v, want nil", err)
			}
		})
	}
}

// Each limit refuses what is past it with the field named, in the same
// *FieldError the coordinator returns as InvalidArgument.
func TestValidateRefusesPastLimits(t *testing.T) {
	t.Parallel()
	bigArg := strings.Repeat("x", MaxArgBytes+1)
	for _, tc := range []struct {
		name    string
		mutate  func(*podiumv1.TaskSpec)
		field   string
		problem string
	}{
		{"a spec over 256 KiB", func(s *podiumv1.TaskSpec) { s.Env = manyEnv(10, 30<<10) }, "spec", "more than 262144"},
		{"257 env entries", func(s *podiumv1.TaskSpec) { s.Env = manyEnv(MaxEnv+1, 1) }, "spec.env", "257 variables, more than 256"},
		{"an env key of 257 bytes", func(s *podiumv1.TaskSpec) { s.Env = map[string]string{strings.Repeat("K", 257): ""} },
			`spec.env["KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK"… (257 bytes)]`, "longer than 256"},
		{"an env value over 32 KiB", func(s *podiumv1.TaskSpec) { s.Env["A"] = strings.Repeat("v", MaxEnvValueBytes+1) },
			`spec.env["A"]`, "value is 32769 bytes, more than 32768"},
		{"a sidecar's env", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Env: manyEnv(MaxEnv+1, 1)}}
		}, "spec.sidecars[0].env", "more than 256"},
		{"65 labels", func(s *podiumv1.TaskSpec) { s.Labels = manyLabels(MaxLabels + 1) }, "spec.labels", "65 labels, more than 64"},
		{"a label of 129 bytes", func(s *podiumv1.TaskSpec) { s.Labels = []string{strings.Repeat("l", MaxLabelBytes+1)} },
			"spec.labels[0]", "longer than 128 bytes"},
		{"9 sidecars", func(s *podiumv1.TaskSpec) { s.Sidecars = manySidecars(MaxSidecars + 1) }, "spec.sidecars", "9 sidecars, more than 8"},
		{"a name of 129 bytes", func(s *podiumv1.TaskSpec) { s.Name = strings.Repeat("n", MaxNameBytes+1) }, "spec.name", "at most 128 bytes"},
		{"a name with a space", func(s *podiumv1.TaskSpec) { s.Name = "deploy web" }, "spec.name", `"deploy web" is not a task name`},
		{"a name with a newline", func(s *podiumv1.TaskSpec) { s.Name = "deploy\nweb" }, "spec.name", "is not a task name"},
		{"a name starting with a dash", func(s *podiumv1.TaskSpec) { s.Name = "-rf" }, "spec.name", "starting with a letter or digit"},
		{"a command over 64 KiB", func(s *podiumv1.TaskSpec) { s.Command = []string{"sh", "-c", strings.Repeat("x", MaxCommandBytes)} },
			"spec.command", "65540 bytes in all, more than 65536"},
		{"one argument over MAX_ARG_STRLEN", func(s *podiumv1.TaskSpec) { s.Command = []string{"echo", bigArg} },
			"spec.command[1]", "MAX_ARG_STRLEN"},
		{"a sidecar's command", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Command: []string{bigArg}}}
		}, "spec.sidecars[0].command[0]", "MAX_ARG_STRLEN"},
		{"a readiness command", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres",
				Readiness: &podiumv1.Readiness{Command: []string{strings.Repeat("x", MaxCommandBytes+1)}}}}
		}, "spec.sidecars[0].readiness.command", "more than 65536"},
		{"a timeout of 10^10 s", func(s *podiumv1.TaskSpec) { s.TimeoutSeconds = 1e10 }, "spec.timeout_seconds", "more than 31536000"},
		{"a timeout past time.Duration", func(s *podiumv1.TaskSpec) { s.TimeoutSeconds = math.MaxInt64 }, "spec.timeout_seconds", "a year"},
		{"a cancel grace of a year and a second", func(s *podiumv1.TaskSpec) { s.CancelGraceSeconds = MaxDurationSeconds + 1 },
			"spec.cancel_grace_seconds", "more than 31536000"},
		{"a readiness timeout past a year", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres",
				Readiness: &podiumv1.Readiness{TcpPort: 5432, TimeoutSeconds: 1e12}}}
		}, "spec.sidecars[0].readiness.timeout_seconds", "more than 31536000"},
		{"an upper-case repository", func(s *podiumv1.TaskSpec) { s.Image = "BusyBox:Latest" }, "spec.image", "must be lowercase"},
		{"a shell injection", func(s *podiumv1.TaskSpec) { s.Image = "busybox;rm${IFS}-rf" }, "spec.image", "not an image reference"},
		{"a flag", func(s *podiumv1.TaskSpec) { s.Image = "--help" }, "spec.image", "not an image reference"},
		{"a bad digest", func(s *podiumv1.TaskSpec) { s.Image = "alpine@sha256:abc" }, "spec.image", "not an image reference"},
		{"a megabyte image name", func(s *podiumv1.TaskSpec) { s.Image = strings.Repeat("a", 200<<10) }, "spec.image", "not an image reference"},
		{"a sidecar's image", func(s *podiumv1.TaskSpec) { s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "Postgres"}} },
			"spec.sidecars[0].image", "must be lowercase"},
		{"invalid UTF-8 in the image", func(s *podiumv1.TaskSpec) { s.Image = "alpine\xff" }, "spec.image", "not valid UTF-8"},
		{"invalid UTF-8 in a command", func(s *podiumv1.TaskSpec) { s.Command = []string{"echo", "\xc3"} }, "spec.command[1]", "not valid UTF-8"},
		{"invalid UTF-8 in an env value", func(s *podiumv1.TaskSpec) { s.Env["A"] = "\xff" }, `spec.env["A"]`, "not valid UTF-8"},
		{"invalid UTF-8 in the user", func(s *podiumv1.TaskSpec) { s.User = "r\xffot" }, "spec.user", "not valid UTF-8"},
		{"invalid UTF-8 in a sidecar", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Readiness: &podiumv1.Readiness{HttpPath: "/\xff"}}}
		}, "spec.sidecars[0].readiness.http_path", "not valid UTF-8"},
		{"an unknown field", func(s *podiumv1.TaskSpec) { withUnknownField(s) }, "spec", "field number 99, which this coordinator does not know"},
		{"an unknown field in resources", func(s *podiumv1.TaskSpec) { withUnknownField(s.Resources) }, "spec.resources", "field number 99"},
		{"too many cores", func(s *podiumv1.TaskSpec) { s.Resources.Cpu = 1e12 }, "spec.resources.cpu", "more than 65536 cores"},
		{"too much memory", func(s *podiumv1.TaskSpec) { s.Resources.MemoryMb = math.MaxInt64 }, "spec.resources.memory_mb", "more than 1073741824 MiB"},
		{"too many pids", func(s *podiumv1.TaskSpec) { s.Resources.Pids = 1 << 40 }, "spec.resources.pids", "kernel's limit"},
		{"a sidecar's memory", func(s *podiumv1.TaskSpec) {
			s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres", Resources: &podiumv1.Resources{MemoryMb: 1 << 50}}}
		}, "spec.sidecars[0].resources.memory_mb", "more than"},
		{"a working_dir past PATH_MAX", func(s *podiumv1.TaskSpec) { s.WorkingDir = "/" + strings.Repeat("d", MaxWorkingDirBytes) },
			"spec.working_dir", "longer than any path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			tc.mutate(s)
			err := Validate(s)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = {Field: %q, Problem: %q}, want field %q and a problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("the error is %d bytes long; it must not quote a long value whole", len(err.Error()))
			}
		})
	}
}

func TestParseRefusesPastLimits(t *testing.T) {
	t.Parallel()
	env := func(indent string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%sK%d: v\n", indent, i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"a timeout past a year", "image: a\ntimeout: 8761h\n", []string{"line 2", "timeout:", "longer than 8760h0m0s (a year)"}},
		{"a cancel grace past time.Duration", "image: a\ncancel_grace: 9999999999h\n", []string{"line 2", "cancel_grace:", "not a duration"}},
		{"a readiness timeout past a year", "image: a\nsidecars:\n  - name: db\n    image: b\n    readiness: {tcp_port: 1, timeout: 10000h}\n",
			[]string{"line 5", "sidecars[0].readiness.timeout", "a year"}},
		{"257 env keys", "image: a\nenv:\n" + env("  ", MaxEnv+1), []string{"line 3", "env has 257 keys, more than 256"}},
		{"a sidecar's env", "image: a\nsidecars:\n  - name: db\n    image: b\n    env:\n" + env("      ", 300),
			[]string{"line 6", "sidecars[0].env has 300 keys"}},
		{"300 top-level keys", env("", 300), []string{"line 1", "the task spec has 300 keys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantParseError(t, tc.file, tc.want)
		})
	}
}

// A spec file with 100,000 env keys took almost a minute in yaml.v3's
// duplicate-key check; it is refused after one linear pass instead. The test
// asserts the refusal, not a time: were the check lost, it would take minutes.
func TestParseRefusesHugeMappingEarly(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("image: alpine:3\nenv:\n")
	for i := range 100_000 {
		fmt.Fprintf(&b, "  K%d: v\n", i)
	}
	file := b.String()[:min(b.Len(), MaxFileBytes)]
	file = file[:strings.LastIndexByte(file, '\n')+1]
	wantParseError(t, file, []string{"line 3", "env has", "keys, more than 256"})
}

func TestParseListsAtMostTwentyProblems(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("image: a\n")
	for i := range 100 {
		fmt.Fprintf(&b, "unknown%d: x\n", i)
	}
	_, err := Parse(strings.NewReader(b.String()))
	if err == nil || !strings.Contains(err.Error(), "has 100 problems") || !strings.Contains(err.Error(), "… and 80 more") {
		t.Fatalf("Parse = %v, want 100 problems of which 20 are listed", err)
	}
	if n := strings.Count(err.Error(), "\n  "); n != 21 {
		t.Errorf("the error lists %d lines, want 20 problems and the rest counted", n)
	}
}

func TestParseSecondsBound(t *testing.T) {
	t.Parallel()
	if got, err := ParseSeconds("8760h"); err != nil || got != MaxDurationSeconds {
		t.Errorf("ParseSeconds(8760h) = %d, %v; want %d", got, err, MaxDurationSeconds)
	}
	if _, err := ParseSeconds("8760h1s"); err == nil || !strings.Contains(err.Error(), "a year") {
		t.Errorf("ParseSeconds(8760h1s) = %v, want it refused as past a year", err)
	}
}

func TestSecondsClamps(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]time.Duration{
		-1:                     0,
		0:                      0,
		30:                     30 * time.Second,
		MaxDurationSeconds:     MaxDuration,
		MaxDurationSeconds + 1: MaxDuration,
		1e10:                   MaxDuration, // wrapped to 0.11 s before
		math.MaxInt64:          MaxDuration,
	} {
		if got := Seconds(in); got != want {
			t.Errorf("Seconds(%d) = %v, want %v", in, got, want)
		}
	}
}

func TestCheckCancelReason(t *testing.T) {
	t.Parallel()
	if err := CheckCancelReason("reason", strings.Repeat("r", MaxCancelReasonBytes)); err != nil {
		t.Errorf("a reason of %d bytes: %v", MaxCancelReasonBytes, err)
	}
	err := CheckCancelReason("--reason", strings.Repeat("r", MaxCancelReasonBytes+1))
	if err == nil || !strings.HasPrefix(err.Error(), "--reason: is 1025 bytes, more than 1024") {
		t.Errorf("a reason of 1025 bytes: %v", err)
	}
	if err := CheckCancelReason("reason", "\xff"); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func TestParseEnvBoundsTheValue(t *testing.T) {
	t.Parallel()
	_, _, err := ParseEnv("BIG=" + strings.Repeat("v", MaxEnvValueBytes+1))
	if err == nil || !strings.Contains(err.Error(), `--env "BIG="`) || !strings.Contains(err.Error(), "more than 32768") {
		t.Fatalf("ParseEnv of a 32 KiB+1 value = %v, want it refused naming --env", err)
	}
	if len(err.Error()) > 256 {
		t.Errorf("the error quotes the value: %d bytes", len(err.Error()))
	}
}
