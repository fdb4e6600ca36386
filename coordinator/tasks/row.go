package tasks

import (
	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// NewRow is the row every submit path stores for a valid spec (Submit,
// Rerun, a schedule's tick and its run-now): a new task id, its submitter,
// and its cost. The cost is placement's rule (placement.Cost, sidecars
// included, and placement.PidsCost), computed here so that the store only
// records what placement later reads and a node's session charges. The
// caller adds what is its own: the audit row, the task it reruns.
func NewRow(spec *podiumv1.TaskSpec, requestedBy string) store.NewTask {
	cpu, mem := placement.Cost(spec)
	return store.NewTask{ID: ids.New("task"), Spec: spec, RequestedBy: requestedBy,
		Cost: store.Cost{CPU: cpu, MemoryMB: mem, Pids: placement.PidsCost(spec)}}
}
