package agent

// The node's GPUs: discovered with nvidia-smi (package gpu) at start and
// again on SIGHUP, reported in Hello and every heartbeat, and handed to
// attempts one by one by the executor (executor.Config.GPUs).
//
// SIGHUP means "look at the GPUs again" and nothing else: an operator sends it
// after installing or fixing the driver, or after a GPU was added or taken
// out (`systemctl kill --signal=HUP podium-agent`). Before this, SIGHUP's default action
// ended the agent; the tasks survived that, but nobody meant it.

import (
	"context"
	"os"

	"github.com/podiumhq/podium/agent/gpu"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// discoverGPUs asks nvidia-smi for the node's GPUs and offers what it finds
// from now on. A discovery that fails offers none, and says why: a node must
// not claim GPUs it cannot hand to a container. GPUs running attempts hold
// stay theirs whatever the discovery says (gpu.Allocator).
func (a *Agent) discoverGPUs(ctx context.Context) {
	gpus, err := gpu.Discover(ctx, a.cfg.NvidiaSMI)
	if err != nil {
		a.log.Error("could not discover the node's GPUs; it offers none", "err", err)
		gpus = nil
	}
	before := len(a.gpus.GPUs())
	a.gpus.Set(gpus)
	if len(gpus) == 0 {
		if before > 0 {
			a.log.Warn("the node no longer offers GPUs", "before", before)
		}
		return
	}
	models := make([]string, len(gpus))
	for i, g := range gpus {
		models[i] = g.Model
	}
	a.log.Info("the node offers its GPUs to tasks", "gpus", len(gpus), "models", models)
}

// rediscoverOnHangup discovers the GPUs again on each SIGHUP (hup, which
// Run registered) until ctx ends, and has the session report them at once.
func (a *Agent) rediscoverOnHangup(ctx context.Context, hup <-chan os.Signal) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			a.log.Info("SIGHUP: discovering the node's GPUs again")
			a.discoverGPUs(ctx)
			a.sess.HeartbeatNow()
		}
	}
}

// reportedGPUs is the node's GPUs as Hello and heartbeats carry them.
func (a *Agent) reportedGPUs() []*podiumv1.Gpu {
	gpus := a.gpus.GPUs()
	if len(gpus) == 0 {
		return nil
	}
	out := make([]*podiumv1.Gpu, len(gpus))
	for i, g := range gpus {
		out[i] = &podiumv1.Gpu{Index: int32(g.Index), Uuid: g.UUID, Model: g.Model, MemoryMb: g.MemoryMiB}
	}
	return out
}
