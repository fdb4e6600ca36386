package executor

// What the executor does for the node's disk beyond one run: the images
// its attempts need (HoldImages, for the image collector), the attempt
// directories left after their runs (SweepAttemptData), and the labelled
// networks and volumes nothing owns any more (SweepDangling).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/egress"
)

// doneFile, in an attempt's host directory, marks an attempt whose terminal
// status is stored and whose uploads are done, kept for debugging
// (Config.KeepAttemptData): its modification time is when that was.
const doneFile = "done"

// DanglingAge is how old a labelled network or volume of another node must
// be before SweepDangling removes it (when nothing uses it): one made a
// moment ago by another agent on the same engine has no container yet.
const DanglingAge = time.Hour

// HoldImages calls f with the images the attempts accepted here need, as
// their specs name them (each task's and each sidecar's, queued or
// running), and accepts no new attempt until f returns. The image collector
// decides on and removes one image inside f, so that an attempt accepted
// meanwhile cannot find its image gone between its check and its container.
func (e *Executor) HoldImages(f func(needed []string)) {
	e.imageMu.Lock()
	defer e.imageMu.Unlock()
	e.mu.Lock()
	var refs []string
	for _, r := range e.runs {
		if img := r.spec.GetImage(); img != "" {
			refs = append(refs, img)
		}
		for _, sc := range r.spec.GetSidecars() {
			if img := sc.GetImage(); img != "" {
				refs = append(refs, img)
			}
		}
	}
	e.mu.Unlock()
	f(refs)
}

// usedImage tells Config.ImageUsed about an image a run uses.
func (r *run) usedImage(id string) {
	if id == "" {
		return
	}
	r.imageMu.Lock()
	r.images = append(r.images, id)
	r.imageMu.Unlock()
	if r.e.imageUsed != nil {
		r.e.imageUsed(id)
	}
}

// endImages records the end of the run's use of its images, and tells
// Config.Ended.
func (r *run) endImages() {
	r.imageMu.Lock()
	ids := append([]string(nil), r.images...)
	r.imageMu.Unlock()
	if r.e.imageUsed != nil {
		for _, id := range ids {
			r.e.imageUsed(id)
		}
	}
	if r.e.ended != nil {
		r.e.ended()
	}
}

// waitStored waits until the coordinator has stored the attempt's events
// up to seq, its terminal status; false means the agent is stopping first
// (the next agent process's sweep finds the directory).
func (r *run) waitStored(ctx context.Context, seq uint64) bool {
	if r.e.stored == nil || r.e.stored(r.key, seq) {
		return true
	}
	t := time.NewTicker(storedCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if r.e.stored(r.key, seq) {
				return true
			}
		}
	}
}

// finishDir ends the attempt's host directory once nothing needs it: at
// once, or, with Config.KeepAttemptData, marked done for SweepAttemptData
// to remove once that has passed.
func (r *run) finishDir() {
	if r.e.keepData <= 0 {
		r.removeDir()
		return
	}
	if _, err := os.Stat(r.dir); err != nil {
		return
	}
	f, err := os.Create(filepath.Join(r.dir, doneFile))
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		r.log.Warn("could not mark the task's directory as done; it is removed now instead of kept", "dir", r.dir, "err", err)
		r.removeDir()
		return
	}
	r.log.Info("keeping the task's directory for debugging (--keep-attempt-data)", "dir", r.dir,
		"until", time.Now().Add(r.e.keepData).UTC().Format(time.RFC3339))
}

// SweepAttemptData removes the host directories of attempts the agent no
// longer holds (no run, no upload, and no event of theirs left for the
// coordinator to store) that are older than Config.KeepAttemptData: a
// directory marked done counts from then, any other from its last change.
// It returns the directories it removed. RemoveOrphans calls it at start;
// the agent calls it again every hour, or more often for a short
// KeepAttemptData (see SweepInterval).
func (e *Executor) SweepAttemptData() ([]string, error) {
	entries, err := os.ReadDir(e.tasksDir)
	if err != nil {
		return nil, fmt.Errorf("read the tasks directory %s: %w", e.tasksDir, err)
	}
	now := time.Now()
	var removed []string
	var errs []error
	for _, d := range entries {
		k, ok := attempt.ParseFileName(d.Name())
		if !ok || e.owns(k) || e.isUploading(k) {
			continue
		}
		if e.stored != nil && !e.stored(k, math.MaxUint64) {
			continue // its events are still the session's to send
		}
		dir := filepath.Join(e.tasksDir, d.Name())
		if e.keepData > 0 {
			if at, ok := lastChange(dir); ok && now.Sub(at) < e.keepData {
				continue
			}
		}
		if e.owns(k) || e.isUploading(k) {
			continue // taken up again while we looked
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
			continue
		}
		removed = append(removed, dir)
		e.log.Info("removed the directory of a task attempt the agent no longer holds", "task_id", k.TaskID, "attempt", k.Attempt,
			"dir", dir, "kept_for", e.keepData)
	}
	return removed, errors.Join(errs...)
}

// SweepInterval is how often the agent should call SweepAttemptData and
// SweepDangling: hourly, or as often as Config.KeepAttemptData when that
// is shorter, so that a directory is not kept much past it.
func (e *Executor) SweepInterval() time.Duration {
	if e.keepData > 0 && e.keepData < time.Hour {
		return max(e.keepData, time.Second)
	}
	return time.Hour
}

// lastChange is when an attempt's directory was marked done, else the
// latest change to it or its runner log. Nothing is followed: the
// directory's entries are the task's to write.
func lastChange(dir string) (time.Time, bool) {
	if st, err := os.Lstat(filepath.Join(dir, doneFile)); err == nil && st.Mode().IsRegular() {
		return st.ModTime(), true
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}, false
	}
	at := st.ModTime()
	if lst, err := os.Lstat(filepath.Join(dir, logFile)); err == nil && lst.ModTime().After(at) {
		at = lst.ModTime()
	}
	return at, true
}

// SweepDangling removes the networks and volumes labelled by Podium that no
// attempt owns: this node's whose attempt the executor does not hold, this
// node's pool networks its pool does not own (netpool.go), and another
// node's (an identity this machine had before, say) older than
// DanglingAge. Another node's pool networks are left: one its agent keeps
// ready has no container to show it is in use. The engine refuses to remove one a container still uses,
// which is then left. It returns the names it removed.
func (e *Executor) SweepDangling(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", LabelTask))
	now := time.Now()
	var removed []string
	var errs []error
	dangling := func(labels map[string]string, created time.Time) bool {
		if labels[LabelNode] != e.nodeID {
			return !created.IsZero() && now.Sub(created) >= DanglingAge
		}
		k := Key{TaskID: labels[LabelTask]}
		if n, err := strconv.Atoi(labels[LabelAttempt]); err == nil {
			k.Attempt = int32(n)
		}
		return !e.owns(k) && !e.isUploading(k)
	}
	inUse := func(err error) bool {
		return err != nil && !isNotFound(err)
	}
	nets, err := e.docker.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		errs = append(errs, fmt.Errorf("list Podium's networks (is the Docker engine running?): %w", err))
	}
	for _, n := range nets {
		if !dangling(n.Labels, n.Created) {
			continue
		}
		if err := e.docker.NetworkRemove(ctx, n.ID); inUse(err) {
			e.log.Debug("a Podium network nothing owns stays: the engine refuses to remove it", "network", n.Name, "err", err)
			continue
		} else if err == nil {
			removed = append(removed, n.Name)
			e.log.Info("removed a network no task attempt owns", "network", n.Name, "node", n.Labels[LabelNode])
		}
		if br := n.Options[egress.BridgeOption]; e.egress != nil && n.Labels[LabelNode] == e.nodeID && egress.IsBridge(br) {
			if err := e.egress.Close(ctx, br); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if gone, err := e.pool.removeStale(ctx); err != nil {
		errs = append(errs, err)
	} else {
		removed = append(removed, gone...)
	}
	vols, err := e.docker.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		errs = append(errs, fmt.Errorf("list Podium's volumes: %w", err))
	}
	for _, v := range vols.Volumes {
		if v == nil {
			continue
		}
		created, _ := time.Parse(time.RFC3339, v.CreatedAt)
		if !dangling(v.Labels, created) {
			continue
		}
		if err := e.docker.VolumeRemove(ctx, v.Name, false); inUse(err) {
			e.log.Debug("a Podium volume nothing owns stays: the engine refuses to remove it", "volume", v.Name, "err", err)
			continue
		} else if err == nil {
			removed = append(removed, v.Name)
			e.log.Info("removed a volume no task attempt owns", "volume", v.Name, "node", v.Labels[LabelNode])
		}
	}
	return removed, errors.Join(errs...)
}
