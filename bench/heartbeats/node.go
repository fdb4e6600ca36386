package main

import (
	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// idleNode is a node with nothing to run: after its Hello it only
// heartbeats, which is all this benchmark measures.
type idleNode struct{ benchkit.NoTasks }

func capacity() *podiumv1.Capacity {
	return &podiumv1.Capacity{CpuCores: 4, MemoryMb: 8192, DiskFreeMb: 100_000, MaxTasks: 4}
}

func (idleNode) Hello(_ int, h *podiumv1.Hello) { h.Capacity = capacity() }

func (idleNode) Heartbeat(int) *podiumv1.Heartbeat {
	return &podiumv1.Heartbeat{Capacity: capacity(), RunningTasks: 0, FreeSlots: 4}
}
