package executor

// A task's image: making sure the engine has it, and the command the runner
// starts from it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

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

// ensureImage makes sure the image is in the engine, pulling it when not,
// and returns what the engine knows of it. Images already present are used as
// they are: a node that re-pulled a mutable tag before every task would make
// tasks slower and results less repeatable. A nil image comes with the status
// to end with (nil when the agent is stopping).
func (r *run) ensureImage(ctx context.Context, ref string) (*image.InspectResponse, *podiumv1.StatusChange) {
	inspect := func() (image.InspectResponse, error) {
		ictx, cancel := context.WithTimeout(r.prepCtx, apiTimeout)
		defer cancel()
		return r.e.docker.ImageInspect(ictx, ref)
	}
	img, err := inspect()
	if err == nil {
		return &img, nil
	}
	if !isNotFound(err) {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		return nil, failed("image %q could not be inspected: %v (is the Docker engine on this node running?)", ref, err)
	}

	r.note("pulling %s", ref)
	r.log.Info("pulling image", "image", ref)
	if err := r.pull(r.prepCtx, ref); err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		r.log.Warn("image pull failed", "image", ref, "err", err)
		return nil, failed("image %q could not be pulled: %v", ref, err)
	}
	r.note("pulled %s", ref)
	r.log.Info("pulled image", "image", ref)
	img, err = inspect()
	if err != nil {
		if st, stop := r.interrupted(ctx); stop {
			return nil, st
		}
		return nil, failed("image %q could not be inspected after it was pulled: %v", ref, err)
	}
	return &img, nil
}

// pull pulls ref and reads the engine's progress stream to its end. The
// stream has to be drained: the pull is only finished when it ends, and a
// failure half-way (a missing layer, a refused blob) arrives in it as an error
// message, not as an error of the call.
func (r *run) pull(ctx context.Context, ref string) error {
	rc, err := r.e.docker.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading pull progress: %w", err)
		}
		if m.Error != nil {
			return m.Error
		}
	}
}
