package taskspec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// The image pull policies a spec's pull (and a sidecar's) may name.
const (
	// PullIfNotPresent uses the node's copy of the image when it has one.
	PullIfNotPresent = "if-not-present"
	// PullAlways asks the registry every time, so that a re-pushed tag is
	// picked up; the engine fetches only the layers it does not have.
	PullAlways = "always"
	// PullNever runs only an image the node already has.
	PullNever = "never"
)

// PullPolicies are the values pull may take; empty means DefaultPull's.
var PullPolicies = []string{PullIfNotPresent, PullAlways, PullNever}

func checkPull(field, pull string) error {
	if pull == "" || slices.Contains(PullPolicies, pull) {
		return nil
	}
	return fieldErr(field, "%s is not a pull policy: give one of %s (or leave it out for %s with :latest or no tag, %s otherwise)",
		clip(pull), strings.Join(PullPolicies, ", "), PullAlways, PullIfNotPresent)
}

// PullPolicy is the policy an image is pulled with: pull itself when given,
// else the default Kubernetes has, "always" for an image tagged :latest or
// not tagged at all (whose content is expected to move) and
// "if-not-present" for any other tag or a digest. An unknown pull is an
// error naming the allowed values; the agent calls it on every assignment,
// whatever the coordinator let through.
func PullPolicy(image, pull string) (string, error) {
	if pull != "" {
		if err := checkPull("pull", pull); err != nil {
			return "", err
		}
		return pull, nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("%s is not an image reference: %w", clip(image), err)
	}
	if _, digested := named.(reference.Digested); digested {
		if t, tagged := named.(reference.Tagged); !tagged || t.Tag() != "latest" {
			return PullIfNotPresent, nil
		}
	}
	if t, tagged := named.(reference.Tagged); !tagged || t.Tag() == "latest" {
		return PullAlways, nil
	}
	return PullIfNotPresent, nil
}

// RegistryHost is the host[:port] of the registry an image is pulled from,
// as `docker login` and `podium registry login` name it: "docker.io" for
// Docker Hub's images ("alpine:3" included), "registry.example.com:5000" for
// "registry.example.com:5000/team/app:1".
func RegistryHost(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("%s is not an image reference: %w", clip(image), err)
	}
	return reference.Domain(named), nil
}
