// Package capacity measures what this machine can offer: CPU cores, memory
// and the free disk of the agent's data directory.
//
// Every figure is best effort. A measurement that fails is reported as 0,
// which the protocol defines as "unmeasured" and the scheduler treats as no
// constraint: refusing every task because one counter could not be read would
// be a worse failure than over-committing one machine.
package capacity

import (
	"context"
	"log/slog"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/mem"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// measureTimeout bounds one measurement. Reading /proc and statfs is quick;
// a data directory on a hung network filesystem is not, and a heartbeat must
// not wait on it.
const measureTimeout = 5 * time.Second

// Measure returns the machine's capacity with max_tasks left 0 for the
// caller to fill in. Failures are logged at debug level (they repeat every
// heartbeat) and leave their field 0.
func Measure(ctx context.Context, dataDir string, log *slog.Logger) *podiumv1.Capacity {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithTimeout(ctx, measureTimeout)
	defer cancel()
	c := &podiumv1.Capacity{}
	if n, err := cpu.CountsWithContext(ctx, true); err == nil && n > 0 {
		c.CpuCores = float64(n)
	} else {
		log.Debug("could not count CPU cores; reporting them as unmeasured", "err", err)
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		c.MemoryMb = int64(vm.Total >> 20)
	} else {
		log.Debug("could not read memory size; reporting it as unmeasured", "err", err)
	}
	if dataDir != "" {
		if u, err := disk.UsageWithContext(ctx, dataDir); err == nil {
			// Free is what an unprivileged writer can still use (f_bavail),
			// which is what the tasks' files will get.
			c.DiskFreeMb = int64(u.Free >> 20)
		} else {
			log.Debug("could not measure free disk; reporting it as unmeasured", "dir", dataDir, "err", err)
		}
	}
	return c
}
