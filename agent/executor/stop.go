package executor

// Stopping a run: a cancel or a timeout, the stop signal, the grace period
// and SIGKILL; the record of a stop begun that lets a restarted agent finish
// it; and removing the attempt's Docker objects afterwards.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// outcome is why a started container stopped, when it was not by itself.
type outcome string

const (
	outcomeExited  outcome = ""        // the task's own process ended
	outcomeCancel  outcome = "cancel"  // Cancel asked for it
	outcomeTimeout outcome = "timeout" // timeout_seconds elapsed
	// outcomeDiskFull: the task filled more disk than the node's workspace
	// limit (the stop's Reason says how much).
	outcomeDiskFull outcome = "workspace"
	// outcomeEngine: the Docker engine stopped the container as it stopped
	// or restarted (see engine.go). Never recorded in stopFile: the agent
	// does not stop a task for it.
	outcomeEngine outcome = "engine"
)

// stopIntent is the content of stopFile.
type stopIntent struct {
	Why    outcome   `json:"why"`
	Reason string    `json:"reason,omitempty"`
	KillAt time.Time `json:"kill_at"`
}

func (r *run) cancel(reason string, grace time.Duration) {
	r.once.Do(func() {
		if reason == "" {
			reason = "cancelled"
		}
		r.cancelReason = reason
		r.cancelGrace = grace
		close(r.cancelled)
		r.prepCancel()
		r.log.Info("cancel requested", "reason", reason, "grace", grace)
	})
}

func (r *run) isCancelled() bool {
	select {
	case <-r.cancelled:
		return true
	default:
		return false
	}
}

// signalStop sends the container its stop signal and returns the channel
// that fires when it is time for SIGKILL.
func (r *run) signalStop(ctx context.Context, id, sig string, killAt time.Time) <-chan time.Time {
	kctx, cancel := apiCtx(ctx, apiTimeout)
	err := r.e.docker.ContainerKill(kctx, id, sig)
	cancel()
	if err != nil && !isNotFound(err) && !cerrdefs.IsConflict(err) {
		r.log.Warn("could not signal the task's container; it will be killed after the grace period", "signal", sig, "err", err)
	}
	return time.After(max(0, time.Until(killAt)))
}

func (r *run) kill(ctx context.Context, id string) {
	kctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	if err := r.e.docker.ContainerKill(kctx, id, "SIGKILL"); err != nil && !isNotFound(err) && !cerrdefs.IsConflict(err) {
		r.log.Warn("could not kill the task's container", "err", err)
	}
}

func (r *run) saveIntent(in stopIntent) {
	b, _ := json.Marshal(in)
	if err := os.WriteFile(filepath.Join(r.dir, stopFile), b, 0o600); err != nil {
		r.log.Warn("could not record why the task is being stopped; an agent restart now would report it as exited", "err", err)
	}
}

func (r *run) loadIntent() *stopIntent {
	b, err := os.ReadFile(filepath.Join(r.dir, stopFile))
	if err != nil {
		return nil
	}
	var in stopIntent
	if json.Unmarshal(b, &in) != nil || (in.Why != outcomeCancel && in.Why != outcomeTimeout && in.Why != outcomeDiskFull) {
		return nil
	}
	return &in
}

// removeContainers removes the attempt's task container, id, and its
// sidecars' by their names, without listing them first: the user waits for
// this, and a list is one more engine call. Whatever it misses, teardown
// finds by the labels and removes with the network.
func (r *run) removeContainers(ctx context.Context, id string) {
	tctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	refs := []string{id}
	for _, sc := range r.spec.GetSidecars() {
		refs = append(refs, SidecarName(r.key, sc.GetName()))
	}
	for i, c := range refs {
		if err := r.e.docker.ContainerRemove(tctx, c, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			name := c
			if i == 0 {
				name = shortID(id)
			}
			r.log.Error("removing a task container failed; it is retried with the network", "container", name, "err", err)
		}
	}
}

// objectFilter selects every Docker object of this attempt.
func (r *run) objectFilter() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", LabelNode+"="+r.e.nodeID),
		filters.Arg("label", LabelTask+"="+r.key.TaskID),
		filters.Arg("label", fmt.Sprintf("%s=%d", LabelAttempt, r.key.Attempt)),
	)
}

// teardown removes every Docker object of the attempt: its containers, then
// its network and volume. It finds them by their labels rather than by what
// this run remembers creating, so it also cleans up after a run an earlier
// agent process started. It makes one try, even when ctx has ended; the
// error says what is left. teardownUntilDone tries until it is all gone.
func (r *run) teardown(ctx context.Context) error {
	tctx, cancel := apiCtx(ctx, apiTimeout)
	defer cancel()
	if err := r.e.removeLabelled(tctx, r.objectFilter(), func(Key) bool { return true }); err != nil {
		return err
	}
	// A pool network has no labels of the attempt: it goes by name, once
	// its containers have.
	if r.network != "" {
		if err := r.e.pool.release(tctx, r.network); err != nil {
			return err
		}
	}
	// The workspace's files go with its volume, before the rest of the
	// host directory (which waits for the artifacts' uploads): what the
	// artifacts globs select was copied out already (copyWorkspace).
	if err := os.RemoveAll(filepath.Join(r.dir, volumeDir)); err != nil {
		r.log.Warn("could not remove the task's workspace files; they go with its directory", "err", err)
	}
	return nil
}

// teardownOrLater tears the attempt down now, and if that fails leaves it to
// main to try again after the terminal status (teardownUntilDone), so that
// the status does not wait for an engine that is restarting.
func (r *run) teardownOrLater(ctx context.Context) {
	if err := r.teardown(ctx); err != nil {
		r.log.Warn("tearing down the task's containers, network or volume failed; trying again after its status", "err", err)
		r.teardownAfterStatus = true
	}
}
