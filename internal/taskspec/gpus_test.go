package taskspec

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The GPU fields at their bounds are accepted, and a spec file carries them.
func TestGPUsAccepted(t *testing.T) {
	t.Parallel()
	for _, r := range []*podiumv1.Resources{
		{Gpus: 1},
		{Gpus: MaxGPUs, GpuModel: strings.Repeat("x", MaxGPUModelBytes), GpuMemoryMb: MaxGPUMemoryMB},
		{Gpus: 2, GpuModel: "NVIDIA H100*", GpuMemoryMb: 81920},
		{Gpus: 1, GpuModel: `Tesla [TV]? \[PCIe\]`},
	} {
		s := good()
		s.Resources = r
		if err := Validate(s); err != nil {
			t.Errorf("Validate(resources %v) = %v, want nil", r, err)
		}
	}
	spec, err := Parse(strings.NewReader("image: alpine:3\nresources:\n  gpus: 2\n  gpu_model: \"NVIDIA H100*\"\n  gpu_memory_mb: 81920\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (&podiumv1.Resources{Gpus: 2, GpuModel: "NVIDIA H100*", GpuMemoryMb: 81920}); !proto.Equal(spec.GetResources(), want) {
		t.Errorf("Parse: resources %v, want %v", spec.GetResources(), want)
	}
}

// Each bad GPU field is refused with its field named and what to give.
func TestGPUsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		r       *podiumv1.Resources
		field   string
		problem string
	}{
		{"negative gpus", &podiumv1.Resources{Gpus: -1}, "spec.resources.gpus", "-1 is negative: give 0 (no GPU)"},
		{"65 gpus", &podiumv1.Resources{Gpus: MaxGPUs + 1}, "spec.resources.gpus", "65 is more than 64 GPUs"},
		{"a model without gpus", &podiumv1.Resources{GpuModel: "NVIDIA*"}, "spec.resources.gpu_model", "is set but gpus is 0"},
		{"memory without gpus", &podiumv1.Resources{GpuMemoryMb: 1024}, "spec.resources.gpu_memory_mb", "is set but gpus is 0"},
		{"a model of 129 bytes", &podiumv1.Resources{Gpus: 1, GpuModel: strings.Repeat("x", MaxGPUModelBytes+1)},
			"spec.resources.gpu_model", "129 bytes, more than 128"},
		{"an unclosed [", &podiumv1.Resources{Gpus: 1, GpuModel: "NVIDIA [H100"}, "spec.resources.gpu_model", "is not a valid pattern"},
		{"a trailing backslash", &podiumv1.Resources{Gpus: 1, GpuModel: `H100\`}, "spec.resources.gpu_model", "is not a valid pattern"},
		{"a slash", &podiumv1.Resources{Gpus: 1, GpuModel: "NVIDIA/H100"}, "spec.resources.gpu_model", `contains "/"`},
		{"a control character", &podiumv1.Resources{Gpus: 1, GpuModel: "H100\n"}, "spec.resources.gpu_model", "control character"},
		{"negative memory", &podiumv1.Resources{Gpus: 1, GpuMemoryMb: -1}, "spec.resources.gpu_memory_mb", "-1 is negative"},
		{"memory past 16 TiB", &podiumv1.Resources{Gpus: 1, GpuMemoryMb: MaxGPUMemoryMB + 1}, "spec.resources.gpu_memory_mb",
			"more than 16777216 MiB (16 TiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			s.Resources = tc.r
			var fe *FieldError
			if err := Validate(s); !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.problem) {
				t.Errorf("Validate = {Field: %q, Problem: %q}, want field %q and a problem containing %q", fe.Field, fe.Problem, tc.field, tc.problem)
			}
		})
	}
}

// A sidecar gets no GPU: asking for one there is refused, not ignored.
func TestGPUsRefusedOnSidecar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r     *podiumv1.Resources
		field string
	}{
		{&podiumv1.Resources{Gpus: 1}, "spec.sidecars[0].resources.gpus"},
		{&podiumv1.Resources{GpuModel: "H100*"}, "spec.sidecars[0].resources.gpu_model"},
		{&podiumv1.Resources{GpuMemoryMb: 1}, "spec.sidecars[0].resources.gpu_memory_mb"},
	} {
		s := good()
		s.Sidecars = []*podiumv1.Sidecar{{Name: "db", Image: "postgres:16", Resources: tc.r}}
		var fe *FieldError
		if err := Validate(s); !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Problem, "a sidecar gets no GPU") {
			t.Errorf("Validate(sidecar resources %v) = %v, want %s refused", tc.r, err, tc.field)
		}
	}
	// In a spec file gpus is not a key of a sidecar's resources at all.
	wantParseError(t, "image: a\nsidecars:\n  - name: db\n    image: b\n    resources: {gpus: 1}\n",
		[]string{"line 5", `unknown key "sidecars[0].resources.gpus"`, "takes cpu, memory_mb, pids"})
	wantParseError(t, "image: a\nresources:\n  gpus: many\n", []string{"line 3", "resources.gpus"})
}

// A GPU's name matches a pattern as a glob reads one segment; the empty
// pattern matches every GPU and a broken one none.
func TestGPUModelMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, name string
		want        bool
	}{
		{"", "Tesla T4", true},
		{"NVIDIA H100*", "NVIDIA H100 80GB HBM3", true},
		{"NVIDIA H100*", "NVIDIA A100-SXM4-80GB", false},
		{"*A100*", "NVIDIA A100-SXM4-80GB", true},
		{"Tesla ?4", "Tesla T4", true},
		{"Tesla T4", "tesla t4", false},
		{"NVIDIA [H100", "NVIDIA [H100", false},
		{"a/b", "a/b", false},
	} {
		if got := GPUModelMatches(tc.model, tc.name); got != tc.want {
			t.Errorf("GPUModelMatches(%q, %q) = %v, want %v", tc.model, tc.name, got, tc.want)
		}
	}
}
