package agent

import (
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultMinFreeDiskMB is the free space the data disk must keep for the
// node to take a new task (Config.MinFreeDiskMB): room for a task's
// directory, its runner logs while the agent reads them, and the spool. A
// node that takes tasks on a full disk fails each at once ("no space left
// on device"), which turns it into a black hole for the whole queue.
const DefaultMinFreeDiskMB = 1024

// diskFloor watches the data disk against the node's free-space floor: it
// reports the floor, and since when the disk has been below it, with every
// heartbeat (podiumv1.Capacity), and refuses assignments while it is below.
type diskFloor struct {
	dir     string
	floorMB int64 // 0: no floor
	log     *slog.Logger

	low condition
}

// check measures the disk and returns its free bytes and since when it has
// been below the floor (zero while above, or when it cannot be measured: an
// unmeasured disk refuses nothing, as capacity's unmeasured figures do).
func (d *diskFloor) check() (free int64, since time.Time) {
	if d.floorMB <= 0 {
		return 0, time.Time{}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.dir, &st); err != nil {
		d.log.Debug("could not measure the data disk's free space; not holding the node to its floor", "dir", d.dir, "err", err)
		return 0, time.Time{}
	}
	free = int64(st.Bavail) * st.Bsize
	since, began, lasted := d.low.update(free < d.floorMB<<20)
	switch {
	case began:
		d.log.Warn("the data disk is below its free-space floor; the node takes no new tasks until space frees",
			"dir", d.dir, "free_mib", free>>20, "floor_mib", d.floorMB)
	case lasted > 0:
		d.log.Info("the data disk is above its free-space floor again; the node takes tasks", "dir", d.dir,
			"free_mib", free>>20, "floor_mib", d.floorMB, "was_below_for", lasted.Round(time.Second))
	}
	return free, since
}

// report adds the floor, and since when the disk is below it, to a
// capacity about to be sent.
func (d *diskFloor) report(c *podiumv1.Capacity) {
	c.MinFreeDiskMb = max(d.floorMB, 0)
	if _, since := d.check(); !since.IsZero() {
		c.DiskLowSince = timestamppb.New(since)
	}
}

// refusal says why the node cannot take a task now, measured afresh: its
// data disk is below the floor. "" takes it.
func (d *diskFloor) refusal() string {
	free, since := d.check()
	if since.IsZero() {
		return ""
	}
	return fmt.Sprintf("node disk below its free-space floor since %s: %d MiB free in %s, floor %d MiB (podium-agent --min-free-disk-mb)",
		since.UTC().Format(time.RFC3339), free>>20, d.dir, d.floorMB)
}
