package executor

import (
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/pkg/jsonmessage"
)

// The engine's messages for each way a pull fails (as Docker 20.10 words
// them, from a real registry) are told apart, each with what to do.
func TestPullFailureSaysWhich(t *testing.T) {
	const ref, host = "127.0.0.1:5000/team/app:1", "127.0.0.1:5000"
	for _, tc := range []struct {
		name     string
		engine   string
		withAuth bool
		want     []string
	}{
		{"missing tag", "Error response from daemon: manifest for 127.0.0.1:5000/team/app:1 not found: manifest unknown: Unknown manifest", true,
			[]string{"was not found in the registry 127.0.0.1:5000", "check the repository and tag"}},
		{"missing repository", "Error response from daemon: repository 127.0.0.1:5000/team/nope not found: name unknown: Unknown name", true,
			[]string{"was not found in the registry 127.0.0.1:5000"}},
		{"no credentials", `Error response from daemon: Head "http://127.0.0.1:5000/v2/team/app/manifests/1": no basic auth credentials`, false,
			[]string{"wants credentials and none are stored for it", "podium registry login 127.0.0.1:5000"}},
		{"wrong credentials", "Error response from daemon: unauthorized", true,
			[]string{"refused the credentials stored for it", "podium registry login 127.0.0.1:5000"}},
		{"nothing listening", `Error response from daemon: Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused`, false,
			[]string{"could not be reached from this node"}},
		{"docker hub's either-or", "Error response from daemon: pull access denied for team/app, repository does not exist or may require 'docker login': denied: requested access to the resource is denied", false,
			[]string{"was not found, or", "podium registry login 127.0.0.1:5000"}},
	} {
		got := pullFailure(ref, host, tc.withAuth, errors.New(tc.engine))
		for _, w := range append(tc.want, ref, tc.engine) {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not say %q", tc.name, got, w)
			}
		}
	}
}

// Progress adds up the layers being downloaded; a finished layer counts
// whole.
func TestPullProgressSums(t *testing.T) {
	p := pullProgress{layers: map[string]*layerProgress{}}
	msgs := []jsonmessage.JSONMessage{
		{ID: "1", Status: "Pulling from team/app"},
		{ID: "a", Status: "Pulling fs layer"},
		{ID: "a", Status: "Downloading", Progress: &jsonmessage.JSONProgress{Current: 10_000_000, Total: 45_000_000}},
		{ID: "b", Status: "Downloading", Progress: &jsonmessage.JSONProgress{Current: 5_000_000, Total: 75_000_000}},
		{ID: "a", Status: "Download complete"},
		{ID: "c", Status: "Already exists"},
	}
	for i := range msgs {
		p.add(&msgs[i])
	}
	if done, total := p.sum(); done != 50_000_000 || total != 120_000_000 {
		t.Fatalf("sum = %d / %d, want 50000000 / 120000000", done, total)
	}
	done, total := p.sum()
	if got := humanBytes(done) + " / " + humanBytes(total); got != "50 MB / 120 MB" {
		t.Fatalf("progress reads %q", got)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 36_634: "36 kB", 1_145_771: "1.1 MB", 45_000_000: "45 MB", 1_200_000_000: "1.2 GB", 12_000_000_000: "12 GB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
