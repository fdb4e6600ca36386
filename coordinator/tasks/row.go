package tasks

import (
	"fmt"
	"time"

	"github.com/podiumhq/podium/coordinator/placement"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// NewRow is the row every submit path stores for a valid spec (Submit,
// Rerun, a schedule's tick and its run-now): a new task id, its submitter,
// its cost and its spec's queue timeout. The cost is placement's rule
// (placement.Cost, sidecars included, and placement.PidsCost), computed here
// so that the store only records what placement later reads and a node's
// session charges. The caller adds what is its own: the audit row, the task
// it reruns, the coordinator's defaults (Defaults.Row).
func NewRow(spec *podiumv1.TaskSpec, requestedBy string) store.NewTask {
	cpu, mem := placement.Cost(spec)
	return store.NewTask{ID: ids.New("task"), Spec: spec, RequestedBy: requestedBy,
		Cost:                store.Cost{CPU: cpu, MemoryMB: mem, Pids: placement.PidsCost(spec)},
		QueueTimeoutSeconds: spec.GetQueueTimeoutSeconds()}
}

// Defaults are what the coordinator gives a task whose spec leaves them
// out, when it is submitted (the task keeps them: a replica started later
// with others changes only the tasks submitted to it since).
type Defaults struct {
	// QueueTimeout is the coordinator's --queue-timeout: how long a task
	// without a queue_timeout of its own may wait queued for a node; 0 for
	// ever.
	QueueTimeout time.Duration
}

// Row is NewRow with the defaults filled in where the spec has none.
func (d Defaults) Row(spec *podiumv1.TaskSpec, requestedBy string) store.NewTask {
	nt := NewRow(spec, requestedBy)
	if nt.QueueTimeoutSeconds == 0 {
		nt.QueueTimeoutSeconds = int64(d.QueueTimeout / time.Second)
	}
	return nt
}

// Check refuses defaults a spec could not give: a queue timeout that is
// negative, past taskspec.MaxDuration (a year) or not whole seconds.
func (d Defaults) Check() error {
	if q := d.QueueTimeout; q < 0 || q > taskspec.MaxDuration || q%time.Second != 0 {
		return fmt.Errorf("--queue-timeout %s: want 0 (none) or a whole number of seconds up to %s (a year), e.g. 30m", q, taskspec.MaxDuration)
	}
	return nil
}
