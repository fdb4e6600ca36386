package executor

// A task's image: making sure the engine has it, and the command the runner
// starts from it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// resolveArgv is the command the runner starts: the task's own, which
// replaces the image's entrypoint and cmd, or else the image's entrypoint
// followed by its cmd — what `docker run IMAGE` would have run. The runner
// takes the container's entrypoint, so the agent has to work this out itself.
func resolveArgv(command []string, img *image.InspectResponse) ([]string, error) {
	if len(command) > 0 {
		return append([]string(nil), command...), nil
	}
	var argv []string
	if img.Config != nil {
		argv = append(argv, img.Config.Entrypoint...)
		argv = append(argv, img.Config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, errors.New("the image has neither an ENTRYPOINT nor a CMD and no command was given: give the command to run")
	}
	return argv, nil
}

// ensureImage makes sure the image is in the engine as its pull policy
// (taskspec.PullPolicy) asks, and returns what the engine knows of it:
// "if-not-present" uses the node's copy when there is one, "always" asks the
// registry first (a re-pushed tag is picked up; layers the node has are not
// fetched again), "never" uses only the node's copy. A nil image comes with
// the status to end with (nil when the agent is stopping).
func (r *run) ensureImage(ctx context.Context, ref, pull string) (*image.InspectResponse, *podiumv1.StatusChange) {
	policy, err := taskspec.PullPolicy(ref, pull)
	if err != nil {
		return nil, failed("image %q: %v", ref, err)
	}
	inspect := func() (image.InspectResponse, error) {
		ictx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		defer cancel()
		return r.e.docker.ImageInspect(ictx, ref)
	}
	if policy != taskspec.PullAlways {
		img, err := inspect()
		if err == nil {
			r.usedImage(img.ID)
			return &img, nil
		}
		if !isNotFound(err) {
			if st, stop := r.interrupted(ctx); stop {
				return nil, st
			}
			if engineUnreachable(err) {
				return nil, givenBack(fmt.Sprintf("image %q could not be inspected", ref), err)
			}
			return nil, failed("image %q could not be inspected: %v (is the Docker engine on this node running?)", ref, err)
		}
		if policy == taskspec.PullNever {
			return nil, failed("image %q is not on this node and the pull policy is %q: pull it on the node first, "+
				"or submit with pull: %s (podium run --pull %s)", ref, policy, taskspec.PullIfNotPresent, taskspec.PullIfNotPresent)
		}
	}

	r.note("pulling %s", ref)
	r.log.Info("pulling image", "image", ref, "policy", policy)
	auth, host := r.registryAuth(ref)
	if err := r.pull(r.prepCtx, ref, auth); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		r.log.Warn("image pull failed", "image", ref, "err", err)
		if engineUnreachable(err) {
			return nil, givenBack(fmt.Sprintf("image %q could not be pulled", ref), err)
		}
		return nil, failed("%s", pullFailure(ref, host, auth != nil, err))
	}
	r.note("pulled %s", ref)
	r.log.Info("pulled image", "image", ref)
	img, err := inspect()
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		return nil, prepFailed(err, "image %q could not be inspected after it was pulled: %v", ref, err)
	}
	r.usedImage(img.ID)
	return &img, nil
}

// registryAuth picks, of the assignment's registry logins, the one for the
// registry ref is pulled from (nil for none), and names that registry. Only
// that login goes to the engine: another registry's password must not reach
// a registry that did not issue it.
func (r *run) registryAuth(ref string) (*podiumv1.RegistryAuth, string) {
	host, err := taskspec.RegistryHost(ref)
	if err != nil {
		return nil, ""
	}
	for _, a := range r.assign.GetRegistryAuths() {
		if canonicalRegistry(a.GetHost()) == canonicalRegistry(host) {
			return a, host
		}
	}
	return nil, host
}

// canonicalRegistry names Docker Hub one way: image references say
// docker.io, `docker login` says index.docker.io or registry-1.docker.io.
func canonicalRegistry(host string) string {
	switch h := strings.ToLower(host); h {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	default:
		return h
	}
}

// pullFailure says why a pull failed in the words a user acts on: the image
// is not in the registry, the registry refused the credentials (or wanted
// some), or the registry could not be reached; the engine's own message
// follows.
func pullFailure(ref, host string, withAuth bool, err error) string {
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(strings.ToLower(msg), s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("pull access denied", "may require 'docker login'"):
		// Docker Hub says this for a repository that does not exist and
		// for one the caller may not read alike.
		if withAuth {
			return fmt.Sprintf("image %q was not found, or the credentials stored for %s may not read it: check the name and tag, "+
				"and the login with podium registry login %s (%v)", ref, host, host, err)
		}
		return fmt.Sprintf("image %q was not found, or %s needs credentials this node was not given: check the name and tag, "+
			"or store a login with podium registry login %s (%v)", ref, host, host, err)
	case cerrdefs.IsNotFound(err) || has("manifest unknown", "name unknown", "not found"):
		return fmt.Sprintf("image %q was not found in the registry %s: check the repository and tag (%v)", ref, host, err)
	case cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) ||
		has("unauthorized", "no basic auth credentials", "authentication required", "access denied"):
		if withAuth {
			return fmt.Sprintf("image %q: the registry %s refused the credentials stored for it: "+
				"store the right ones with podium registry login %s (%v)", ref, host, host, err)
		}
		return fmt.Sprintf("image %q: the registry %s wants credentials and none are stored for it: "+
			"an admin stores them with podium registry login %s (%v)", ref, host, host, err)
	case has("dial tcp", "connection refused", "no such host", "i/o timeout", "network is unreachable",
		"no route to host", "tls handshake", "http response to https client", "connection reset"):
		return fmt.Sprintf("image %q: the registry %s could not be reached from this node: check its address and that it is up, "+
			"and the node's network and DNS (%v)", ref, host, err)
	}
	return fmt.Sprintf("image %q could not be pulled: %v", ref, err)
}

// pull pulls ref and reads the engine's progress stream to its end, sending
// the pulled and total bytes to the task's log as notes, at most one every
// pullNoteEvery and one when the last layer is in. The stream has to be
// drained: the pull is only finished when it ends, and a failure half-way (a
// missing layer, a refused blob) arrives in it as an error message, not as an
// error of the call.
func (r *run) pull(ctx context.Context, ref string, auth *podiumv1.RegistryAuth) error {
	opts := image.PullOptions{}
	if auth != nil {
		enc, err := registry.EncodeAuthConfig(registry.AuthConfig{
			Username: auth.GetUsername(), Password: auth.GetPassword(), ServerAddress: auth.GetHost(),
		})
		if err != nil {
			return fmt.Errorf("encode the registry login for %s: %w", auth.GetHost(), err)
		}
		opts.RegistryAuth = enc
	}
	rc, err := r.e.docker.ImagePull(ctx, ref, opts)
	if err != nil {
		return err
	}
	defer rc.Close()
	p := pullProgress{layers: map[string]*layerProgress{}}
	var last time.Time
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				if done, total := p.sum(); total > 0 {
					r.note("pulling %s: %s / %s", ref, humanBytes(done), humanBytes(total))
				}
				return nil
			}
			return fmt.Errorf("reading pull progress: %w", err)
		}
		if m.Error != nil {
			return m.Error
		}
		if p.add(&m) && time.Since(last) >= pullNoteEvery {
			if done, total := p.sum(); total > 0 && done < total {
				r.note("pulling %s: %s / %s", ref, humanBytes(done), humanBytes(total))
				last = time.Now()
			}
		}
	}
}

// pullNoteEvery is the least time between two progress notes of one pull:
// a pull of many layers reports several times a second, and each note is
// an event stored with the task.
const pullNoteEvery = time.Second

// pullProgress adds up the engine's per-layer progress of one pull.
type pullProgress struct {
	layers map[string]*layerProgress
	order  []string
}

type layerProgress struct{ current, total int64 }

// add takes one progress message and says whether the sum changed. Only
// downloads count: a layer's size is known once it starts downloading, and
// one the node had already ("Already exists") is not pulled at all.
func (p *pullProgress) add(m *jsonmessage.JSONMessage) bool {
	if m.ID == "" {
		return false
	}
	l := p.layers[m.ID]
	switch {
	case m.Status == "Downloading" && m.Progress != nil && m.Progress.Total > 0:
		if l == nil {
			l = &layerProgress{}
			p.layers[m.ID] = l
			p.order = append(p.order, m.ID)
		}
		l.current, l.total = m.Progress.Current, m.Progress.Total
		return true
	case l != nil && (m.Status == "Download complete" || m.Status == "Pull complete" || m.Status == "Verifying Checksum"):
		changed := l.current != l.total
		l.current = l.total
		return changed
	}
	return false
}

func (p *pullProgress) sum() (done, total int64) {
	for _, id := range p.order {
		l := p.layers[id]
		done += l.current
		total += l.total
	}
	return done, total
}

// humanBytes writes n in decimal units, as the engine's own progress bars
// do: "812 kB", "45 MB", "1.2 GB".
func humanBytes(n int64) string {
	const k = 1000
	switch {
	case n < k:
		return fmt.Sprintf("%d B", n)
	case n < k*k:
		return fmt.Sprintf("%d kB", n/k)
	case n < 10*k*k*k:
		if n < 10*k*k {
			return fmt.Sprintf("%.1f MB", float64(n)/(k*k))
		}
		if n < k*k*k {
			return fmt.Sprintf("%d MB", n/(k*k))
		}
		return fmt.Sprintf("%.1f GB", float64(n)/(k*k*k))
	default:
		return fmt.Sprintf("%d GB", n/(k*k*k))
	}
}
