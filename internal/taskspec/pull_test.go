package taskspec

import (
	"strings"
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A spec file's pull, the task's and a sidecar's, reaches the spec as written.
func TestParsePull(t *testing.T) {
	const file = "image: alpine:3\npull: always\nsidecars:\n  - name: db\n    image: postgres:16\n    pull: never\n"
	spec, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetPull() != "always" || spec.GetSidecars()[0].GetPull() != "never" {
		t.Fatalf("pull: task %q, sidecar %q; want always, never", spec.GetPull(), spec.GetSidecars()[0].GetPull())
	}
	if err := Validate(spec); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// An unknown policy, the task's or a sidecar's, is refused naming the field
// and every allowed value.
func TestValidateRefusesUnknownPull(t *testing.T) {
	for _, tc := range []struct {
		spec  *podiumv1.TaskSpec
		field string
	}{
		{&podiumv1.TaskSpec{Image: "a", Pull: "IfNotPresent"}, "spec.pull"},
		{&podiumv1.TaskSpec{Image: "a", Sidecars: []*podiumv1.Sidecar{{Name: "db", Image: "b", Pull: "sometimes"}}}, "spec.sidecars[0].pull"},
	} {
		err := Validate(tc.spec)
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != tc.field {
			t.Fatalf("Validate: %v; want a FieldError for %s", err, tc.field)
		}
		for _, want := range PullPolicies {
			if !strings.Contains(fe.Problem, want) {
				t.Errorf("%s: %q does not name %q", tc.field, fe.Problem, want)
			}
		}
	}
}

// The default is Kubernetes': always for :latest or no tag, if-not-present
// for any other tag or a digest; a given policy wins.
func TestPullPolicy(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ image, pull, want string }{
		{"alpine", "", PullAlways},
		{"alpine:latest", "", PullAlways},
		{"127.0.0.1:5000/team/app", "", PullAlways},
		{"127.0.0.1:5000/team/app:1.2", "", PullIfNotPresent},
		{"alpine:3", "", PullIfNotPresent},
		{"alpine" + digest, "", PullIfNotPresent},
		{"alpine:3" + digest, "", PullIfNotPresent},
		{"alpine:latest", PullNever, PullNever},
		{"alpine:3", PullAlways, PullAlways},
	} {
		got, err := PullPolicy(tc.image, tc.pull)
		if err != nil || got != tc.want {
			t.Errorf("PullPolicy(%q, %q) = %q, %v; want %q", tc.image, tc.pull, got, err, tc.want)
		}
	}
	if _, err := PullPolicy("alpine", "sometimes"); err == nil || !strings.Contains(err.Error(), "if-not-present, always, never") {
		t.Errorf("PullPolicy with an unknown policy: %v; want the allowed list", err)
	}
}

func TestRegistryHost(t *testing.T) {
	for image, want := range map[string]string{
		"alpine:3":                    "docker.io",
		"library/alpine":              "docker.io",
		"ghcr.io/org/app:1":           "ghcr.io",
		"127.0.0.1:5000/team/app:1.2": "127.0.0.1:5000",
		"registry.example.com/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": "registry.example.com",
	} {
		if got, err := RegistryHost(image); err != nil || got != want {
			t.Errorf("RegistryHost(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
}
