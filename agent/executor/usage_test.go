package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// engineCPU is the CPU time the engine's stats show a running container used.
func (e *env) engineCPU(t *testing.T, key executor.Key) time.Duration {
	t.Helper()
	res, err := e.docker.ContainerStatsOneShot(context.Background(), executor.ContainerName(key))
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return 0
	}
	return time.Duration(st.CPUStats.CPUUsage.TotalUsage)
}

// A runner killed from outside writes no exit record, so its cgroup's
// figures are lost with it; the agent still reports what the engine's stats
// showed the container use while it ran, a floor no task can lower. Here the
// task spins until the engine has seen it use half a CPU-second and is then
// killed with SIGKILL: its status carries a CPU time and a peak memory, not
// "unknown".
func TestUsageFloorWhenTheRunnerCannotReport(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.usageSample = 100 * time.Millisecond
	ex := e.newExecutor()
	rec := newRecorder()
	a := e.assign(t, e.sh("echo started; while :; do :; done"))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "started\n")
	wait.For(t, time.Minute, "the engine's stats to show the task used half a CPU-second", func() bool {
		return e.engineCPU(t, key) >= 500*time.Millisecond
	})
	if err := e.docker.ContainerKill(context.Background(), executor.ContainerName(key), "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, time.Minute)
	st := rec.final(t, key)
	u := st.GetUsage()
	if st.GetSignal() != 9 || u == nil || u.CpuSeconds == nil || u.PeakMemoryBytes == nil || u.WallSeconds == nil {
		t.Fatalf("final status %v; want killed by signal 9, with cpu, peak memory and wall time", st)
	}
	// The sampler looks every 100 ms and the engine had seen 0.5 s when the
	// test looked: its last sample before the kill saw most of that.
	if c := u.GetCpuSeconds(); c < 0.2 || c > u.GetWallSeconds()+1 {
		t.Errorf("cpu %.3f s (wall %.3f s) for a task the engine saw use 0.5 s; want at least 0.2 s and no more than the wall time allows",
			c, u.GetWallSeconds())
	}
}
