package store

import (
	"testing"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The usage a batch writes: the output it stores, counted per attempt, and
// the usage of a status that ended the attempt, only if that status moved the
// task; a terminal status the task had moved past brings none.
func TestPlanCountsOutputAndTakesUsageFromTheEndOnly(t *testing.T) {
	t.Parallel()
	cpu := 1.25
	end := func(seq uint64) *podiumv1.TaskEvent {
		ev := statusAt(seq, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
		ev.GetStatus().Usage = &podiumv1.Usage{CpuSeconds: &cpu}
		return ev
	}
	items := []IngestItem{
		{NodeID: "node_a", Epoch: 7, TaskID: "task_1", Attempt: 1, Events: []*podiumv1.TaskEvent{
			logAt(3, "hello"), logAt(4, "world!"), end(5)}},
		{NodeID: "node_b", Epoch: 3, TaskID: "task_2", Attempt: 1, Events: []*podiumv1.TaskEvent{end(1)}},
	}
	p := chooseNew(items, lockedFor())
	p.reserved("task_1", 13, Running)
	p.reserved("task_2", 1, Cancelled)
	p.applyRound(p.statusRounds([]string{"task_1", "task_2"})[0], map[string]bool{"task_1": true})

	tasks, _, _, _, out := p.attemptColumns()
	for i, id := range tasks {
		if want := map[string]int64{"task_1": 11, "task_2": 0}[id]; out[i] != want {
			t.Errorf("%s: output bytes %d, want %d", id, out[i], want)
		}
	}
	uTasks, _, uCPU, uPeak, uWall := p.usageColumns()
	if len(uTasks) != 1 || uTasks[0] != "task_1" || uCPU[0] == nil || *uCPU[0] != 1.25 || uPeak[0] != nil || uWall[0] != nil {
		t.Fatalf("usage rows for %v (cpu %v, peak %v, wall %v); want task_1's alone: cpu 1.25, peak and wall unknown",
			uTasks, uCPU, uPeak, uWall)
	}
}
