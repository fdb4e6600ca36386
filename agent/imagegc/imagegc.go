// Package imagegc keeps a node's disk from filling with images: it records
// when each image was last used by a task or sidecar on the node, and while
// the data disk or the engine's own root is short of free space, removes the
// images no task has used for a while, least recently used first, until
// there is room again. It also sweeps the engine's build cache.
//
// It never removes an image a task or sidecar accepted on this node needs,
// queued or running (Config.Hold asks the executor, which accepts no new
// attempt while one removal is decided and made), one an --image-keep
// pattern matches, or one Config.Protect names. An image Podium never used
// counts as used when the agent first saw it, so an operator's fresh image
// is not removed on its first day. The engine itself refuses to remove an
// image a container, running or stopped, still uses; such an image is
// skipped.
package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultUnused   = 24 * time.Hour
	DefaultLowFree  = 20.0
	DefaultInterval = 5 * time.Minute
)

// callTimeout bounds each engine call the collector makes.
const callTimeout = time.Minute

// Config is what a Collector needs.
type Config struct {
	Docker *client.Client
	// DataDir is the agent's data directory: the record of uses
	// (RecordFile) is kept there, and its disk is one of the two measured.
	DataDir string
	// Unused is how long an image must have gone unused before it may be
	// removed (--image-gc-unused); 0 means DefaultUnused.
	Unused time.Duration
	// LowFree is the share of free space, in percent (0..100), under which
	// images are removed (--image-gc-low-free). Use DefaultLowFree for the
	// default: 0 is a valid setting, which never removes an image.
	LowFree float64
	// Keep are the --image-keep patterns: images they match stay.
	Keep []Pattern
	// Protect are image ids that stay whatever their use: the agent's own
	// image, when it runs in a container.
	Protect []string
	// Interval is how often the collector looks; 0 means DefaultInterval.
	Interval time.Duration
	// Hold calls f with the images the attempts accepted on this node
	// need (references as their specs give them, tasks' and sidecars'),
	// and accepts no new attempt until f returns (executor.HoldImages).
	// Nil means no attempt needs any.
	Hold func(f func(needed []string))
	// Logger receives the collector's log; nil means slog.Default().
	Logger *slog.Logger
}

// Check says what is wrong with the settings a person gives, if anything.
func (c Config) Check() error {
	switch {
	case c.Unused < 0:
		return fmt.Errorf("the time an image must go unused before it is removed is %s: give a duration above 0, e.g. 24h", c.Unused)
	case c.LowFree < 0 || c.LowFree > 100:
		return fmt.Errorf("the free-space threshold for removing images is %g%%: give a share between 0%% and 100%%, e.g. 20%%", c.LowFree)
	case c.Interval < 0:
		return fmt.Errorf("the image collector's interval is %s: give a duration above 0", c.Interval)
	case len(c.Keep) > MaxKeep:
		return fmt.Errorf("%d image patterns given; at most %d are taken", len(c.Keep), MaxKeep)
	}
	return nil
}

// Stats are the collector's counters since the agent started.
type Stats struct {
	// Removed counts the images removed, Bytes their sizes as the engine
	// reported them (layers another image shares are not freed, so this
	// may be more than the disk got back).
	Removed, Bytes int64
}

// Removal is one image a pass removed.
type Removal struct {
	Image Image
}

// Collector is the node's image garbage collector. Run it with Run; record
// uses with Used.
type Collector struct {
	cfg     Config
	log     *slog.Logger
	protect map[string]bool
	kick    chan struct{}

	// mu guards used, the record of uses, and its file.
	mu   sync.Mutex
	used map[string]time.Time

	// pass serialises passes: Run's and a test's.
	pass sync.Mutex

	removed, bytes atomic.Int64
	// buildCacheRefused is set once the engine refused to prune its build
	// cache, which is then said once and not asked again.
	buildCacheRefused atomic.Bool
}

// New checks cfg and loads the record of uses. A record that cannot be read
// is started afresh, with a warning: every image in the engine then counts
// as first seen now.
func New(cfg Config) (*Collector, error) {
	if cfg.Docker == nil {
		return nil, errors.New("imagegc: Config.Docker is nil")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("imagegc: Config.DataDir is empty")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Unused == 0 {
		cfg.Unused = DefaultUnused
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Collector{cfg: cfg, log: log, protect: map[string]bool{}, kick: make(chan struct{}, 1)}
	for _, id := range cfg.Protect {
		c.protect[id] = true
	}
	used, err := loadRecord(cfg.DataDir)
	if err != nil {
		log.Warn("the record of image uses cannot be read; every image counts as first seen now", "dir", cfg.DataDir, "err", err)
	}
	c.used = used
	return c, nil
}

// Used records that a task or sidecar on this node used the image id at t.
// A use older than the one recorded changes nothing.
func (c *Collector) Used(id string, t time.Time) {
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.used[id]; ok && !t.After(old) {
		return
	}
	c.used[id] = t
	trim(c.used, MaxRecorded)
	if err := saveRecord(c.cfg.DataDir, c.used); err != nil {
		c.log.Warn("could not keep the record of image uses; after a restart this image may count as older than it is",
			"image", id, "err", err)
	}
}

// Kick asks for a pass soon, as a task ends: a pass does nothing but
// refresh the record unless the disk is short of space.
func (c *Collector) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Stats reads the counters.
func (c *Collector) Stats() Stats {
	return Stats{Removed: c.removed.Load(), Bytes: c.bytes.Load()}
}

// Run passes at once, then every Config.Interval and after each Kick, until
// ctx ends, and returns nil then. A pass that fails is logged and tried
// again: an engine that does not answer for a while must not stop the
// agent, whose tasks are what the collector makes room for.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("the image collector could not finish a pass; it tries again later", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.kick:
		}
	}
}

// Pass refreshes the record with the engine's images and, while a disk is
// short of space, removes unused ones least recently used first. It returns
// what it removed, in order.
func (c *Collector) Pass(ctx context.Context) ([]Removal, error) {
	c.pass.Lock()
	defer c.pass.Unlock()
	imgs, err := c.images(ctx)
	if err != nil {
		return nil, err
	}
	low, why, err := c.low(ctx)
	if err != nil || !low {
		return nil, err
	}
	var out []Removal
	for _, im := range Plan(imgs, time.Now(), c.cfg.Unused, c.cfg.Keep, c.protect) {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if c.remove(ctx, im, why) {
			out = append(out, Removal{Image: im})
			if low, why, err = c.low(ctx); err != nil || !low {
				return out, err
			}
		}
	}
	return out, nil
}

// images lists the engine's images with their last uses, entering those
// first seen now and forgetting those gone.
func (c *Collector) images(ctx context.Context) ([]Image, error) {
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	list, err := c.cfg.Docker.ImageList(lctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the engine's images (is the Docker engine running?): %w", err)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	present := make(map[string]bool, len(list))
	out := make([]Image, 0, len(list))
	for _, s := range list {
		present[s.ID] = true
		t, ok := c.used[s.ID]
		if !ok {
			t, changed = now, true
			c.used[s.ID] = t
		}
		im := Image{ID: s.ID, Size: s.Size, LastUsed: t}
		for _, tag := range s.RepoTags {
			if tag != "<none>:<none>" {
				im.Tags = append(im.Tags, tag)
			}
		}
		for _, d := range s.RepoDigests {
			if d != "<none>@<none>" {
				im.Digests = append(im.Digests, d)
			}
		}
		out = append(out, im)
	}
	for id := range c.used {
		if !present[id] {
			delete(c.used, id)
			changed = true
		}
	}
	if changed {
		trim(c.used, MaxRecorded)
		if err := saveRecord(c.cfg.DataDir, c.used); err != nil {
			c.log.Warn("could not keep the record of image uses", "dir", c.cfg.DataDir, "err", err)
		}
	}
	return out, nil
}

// low says whether the data disk or the engine's root (when this host sees
// it) has less free space than Config.LowFree, and which with how much.
func (c *Collector) low(ctx context.Context) (bool, string, error) {
	dirs := []string{c.cfg.DataDir}
	ictx, cancel := context.WithTimeout(ctx, callTimeout)
	info, err := c.cfg.Docker.Info(ictx)
	cancel()
	if err == nil && info.DockerRootDir != "" {
		if _, serr := os.Stat(info.DockerRootDir); serr == nil {
			dirs = append(dirs, info.DockerRootDir)
		}
	}
	for _, d := range dirs {
		free, err := FreePercent(d)
		if err != nil {
			return false, "", fmt.Errorf("measure the free space of %s: %w", d, err)
		}
		if free < c.cfg.LowFree {
			return true, fmt.Sprintf("%s has %.1f%% free, under %g%%", d, free, c.cfg.LowFree), nil
		}
	}
	return false, "", nil
}

// FreePercent is the share of dir's file system an unprivileged user may
// still fill, in percent.
func FreePercent(dir string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	if st.Blocks == 0 {
		return 100, nil
	}
	return float64(st.Bavail) / float64(st.Blocks) * 100, nil
}

// remove removes one image unless an attempt on the node needs it, and says
// whether the image is gone. Its tags go one by one, each checked to still
// name the image (a tag moved since the list stays), and the engine refuses
// any that a container uses.
func (c *Collector) remove(ctx context.Context, im Image, why string) bool {
	removed := false
	hold := c.cfg.Hold
	if hold == nil {
		hold = func(f func([]string)) { f(nil) }
	}
	hold(func(needed []string) {
		for _, ref := range needed {
			if id, err := c.idOf(ctx, ref); err == nil && id == im.ID {
				c.log.Debug("an image a task on this node needs stays", "image", im.Name(), "needed_as", ref)
				return
			}
		}
		removed = c.removeNow(ctx, im)
	})
	if !removed {
		return false
	}
	c.removed.Add(1)
	c.bytes.Add(im.Size)
	c.log.Info("removed an unused image", "image", im.Name(), "id", im.ID, "size", im.Size,
		"last_used", im.LastUsed.UTC().Format(time.RFC3339), "why", why)
	c.mu.Lock()
	delete(c.used, im.ID)
	c.mu.Unlock()
	return true
}

func (c *Collector) idOf(ctx context.Context, ref string) (string, error) {
	ictx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := c.cfg.Docker.ImageInspect(ictx, ref)
	return info.ID, err
}

func (c *Collector) removeNow(ctx context.Context, im Image) bool {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	refs := im.Tags
	if len(refs) == 0 {
		refs = []string{im.ID}
	}
	deleted := false
	for _, ref := range refs {
		if ref != im.ID {
			if id, err := c.idOf(rctx, ref); err != nil || id != im.ID {
				continue // moved to another image, or gone, since the list
			}
		}
		res, err := c.cfg.Docker.ImageRemove(rctx, ref, image.RemoveOptions{PruneChildren: true})
		switch {
		case cerrdefs.IsNotFound(err):
			continue
		case cerrdefs.IsConflict(err):
			c.log.Debug("an unused image stays: the engine says something still uses it", "image", ref, "err", err)
			return false
		case err != nil:
			c.log.Warn("could not remove an unused image", "image", ref, "err", err)
			return false
		}
		for _, r := range res {
			if r.Deleted != "" {
				deleted = true
			}
		}
	}
	return deleted
}

// PruneBuildCache removes the engine's build cache no build used in the last
// day. An engine that refuses (an old API, or no BuildKit) is said once, in
// the log, and not asked again.
func (c *Collector) PruneBuildCache(ctx context.Context) {
	if c.buildCacheRefused.Load() {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rep, err := c.cfg.Docker.BuildCachePrune(pctx, build.CachePruneOptions{
		Filters: filters.NewArgs(filters.Arg("until", "24h")),
	})
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil && refused(err):
		c.buildCacheRefused.Store(true)
		c.log.Info("the Docker engine does not prune its build cache for the agent; it is not asked again", "err", err)
	case err != nil:
		c.log.Warn("could not prune the engine's build cache; trying again in an hour", "err", err)
	case rep != nil && rep.SpaceReclaimed > 0:
		c.log.Info("pruned the engine's build cache", "entries", len(rep.CachesDeleted), "bytes", rep.SpaceReclaimed)
	}
}

// refused says whether an error is the engine (or the client, for an old
// API) declining the request, rather than failing it.
func refused(err error) bool {
	return strings.Contains(err.Error(), "requires API version") || cerrdefs.IsNotImplemented(err) || cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) ||
		cerrdefs.IsPermissionDenied(err) || cerrdefs.IsUnavailable(err)
}

// OwnImage is the image of the container this process runs in, when it
// runs in one of this engine's containers ("" otherwise): the image the
// agent itself came in, which must not be removed under it.
func OwnImage(ctx context.Context, docker *client.Client) string {
	if _, err := os.Stat("/.dockerenv"); err != nil {
		return ""
	}
	host, err := os.Hostname()
	if err != nil {
		return ""
	}
	ictx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := docker.ContainerInspect(ictx, host)
	if err != nil || info.ContainerJSONBase == nil {
		return ""
	}
	return info.Image
}
