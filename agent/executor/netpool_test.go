package executor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/podiumhq/podium/agent/executor"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// holdScript prints "on" and waits for a message in its inbox before it
// exits 0: a task that holds its network until the test lets it go.
const holdScript = "echo on; podium-runner ask >/dev/null"

// startPool makes an executor with a warm pool of n networks and starts the
// pool, stopping it when the test ends (before setup's check that nothing is
// left, which runs later).
func (e *env) startPool(t *testing.T, n int) *executor.Executor {
	t.Helper()
	e.networkPool = n
	ex := e.newExecutor()
	e.networkPool = 0
	ctx, cancel := context.WithCancel(context.Background())
	ex.StartPool(ctx)
	t.Cleanup(func() {
		ex.StopPool()
		cancel()
	})
	return ex
}

// poolNetworks lists the pool networks of the env's node, and those of them
// no container uses.
func (e *env) poolNetworks(t *testing.T) (all, idle []string) {
	t.Helper()
	ctx := context.Background()
	nets, err := e.docker.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", executor.LabelNode+"="+e.nodeID), filters.Arg("label", executor.LabelPool))})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		all = append(all, n.Name)
		info, err := e.docker.NetworkInspect(ctx, n.ID, network.InspectOptions{})
		if err == nil && len(info.Containers) == 0 {
			idle = append(idle, n.Name)
		}
	}
	slices.Sort(all)
	slices.Sort(idle)
	return all, idle
}

// waitIdle waits until ex's pool holds n networks ready, and returns the
// node's pool networks no container uses.
func (e *env) waitIdle(t *testing.T, ex *executor.Executor, n int) []string {
	t.Helper()
	wait.For(t, time.Minute, "the warm pool to hold its networks", func() bool { return ex.PoolReady() == n })
	_, idle := e.poolNetworks(t)
	if len(idle) != n {
		t.Fatalf("the pool holds %d networks ready, and the node has %d pool networks nothing uses: %v", n, len(idle), idle)
	}
	return idle
}

// networkOf is the network the task's container runs on, and the
// containers on it.
func (e *env) networkOf(t *testing.T, key executor.Key) (string, network.Inspect) {
	t.Helper()
	ctx := context.Background()
	info, err := e.docker.ContainerInspect(ctx, executor.ContainerName(key))
	if err != nil {
		t.Fatal(err)
	}
	name := string(info.HostConfig.NetworkMode)
	nw, err := e.docker.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name, nw
}

func (e *env) networkGone(t *testing.T, name string) {
	t.Helper()
	if _, err := e.docker.NetworkInspect(context.Background(), name, network.InspectOptions{}); err == nil {
		t.Errorf("network %s is still there after its task ended", name)
	}
}

// TestNetworkPool: tasks started together each run on a pool network of
// their own, which only their container joins; the pool makes new ones in
// their place while they run; each goes with its task; and the pool's
// networks go when it stops.
func TestNetworkPool(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ex := e.startPool(t, 2)
	ready := e.waitIdle(t, ex, 2)

	ctx := context.Background()
	type started struct {
		key  executor.Key
		rec  *recorder
		done <-chan struct{}
	}
	var runs []started
	for range 2 {
		rec := newRecorder()
		a := e.assign(t, e.sh(holdScript))
		done, err := ex.Start(ctx, a, rec.emit)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, started{executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}, rec, done})
	}
	var taken []string
	for _, r := range runs {
		r.rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
		name, nw := e.networkOf(t, r.key)
		if !slices.Contains(ready, name) {
			t.Errorf("task %s runs on %s, not one of the pool's networks %v", r.key, name, ready)
		}
		if slices.Contains(taken, name) {
			t.Fatalf("two tasks run on network %s", name)
		}
		taken = append(taken, name)
		if len(nw.Containers) != 1 {
			t.Errorf("network %s has %d containers, want the task's alone: %v", name, len(nw.Containers), nw.Containers)
		}
		for _, c := range nw.Containers {
			if c.Name != executor.ContainerName(r.key) {
				t.Errorf("network %s of task %s has container %s on it", name, r.key, c.Name)
			}
		}
	}

	// While both run, the pool holds two new networks for the next tasks.
	for _, n := range e.waitIdle(t, ex, 2) {
		if slices.Contains(taken, n) {
			t.Errorf("the pool offers %s, which a task holds", n)
		}
	}

	for i, r := range runs {
		if _, err := ex.Inject(r.key.TaskID, r.key.Attempt, 1, "done"); err != nil {
			t.Fatal(err)
		}
		wait.Closed(t, time.Minute, "the task to end", r.done)
		if st := r.rec.final(t, r.key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
			t.Fatalf("final status %v", st)
		}
		if got := string(r.rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "on\n" {
			t.Errorf("stdout %q", got)
		}
		e.networkGone(t, taken[i])
	}

	ex.StopPool()
	if all, _ := e.poolNetworks(t); len(all) > 0 {
		t.Errorf("pool networks left after the pool stopped: %v", all)
	}
}

// TestNetworkPoolAcrossRestart: an agent stops without removing its pool
// (it crashed) while a task holds a pool network. The next agent resumes the
// task on that network, and its RemoveOrphans removes the networks the
// earlier pool held ready but keeps the task's, which goes once the task
// ends.
func TestNetworkPoolAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.startPool(t, 1) // its StopPool runs only at the end: a crash
	e.waitIdle(t, first, 1)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	rec := newRecorder()
	a := e.assign(t, e.sh(holdScript+"; echo after"))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := first.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	taskNet, _ := e.networkOf(t, key)
	if !strings.HasPrefix(taskNet, "podium-pool-") {
		t.Fatalf("the task runs on %s, not a pool network", taskNet)
	}
	left := e.waitIdle(t, first, 1) // the first pool's refill, left behind
	waitOutputContains(t, rec, "on\n")
	stop() // the agent stops; the task runs on
	waitDone(t, done, 30*time.Second)

	second := e.newExecutor()
	rec2 := newRecorder()
	done, err = second.Resume(context.Background(), a, rec.lastCursor(), rec2.emit)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.RemoveOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	all, _ := e.poolNetworks(t)
	if !slices.Equal(all, []string{taskNet}) {
		t.Fatalf("after the restart's RemoveOrphans the pool networks are %v, want only the task's %s (the earlier pool's %v removed)",
			all, taskNet, left)
	}

	if _, err := second.Inject(a.TaskId, a.Attempt, 1, "done"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, time.Minute)
	if st := rec2.final2(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	e.networkGone(t, taskNet)
	if all, _ := e.poolNetworks(t); len(all) > 0 {
		t.Errorf("pool networks left: %v", all)
	}
}

// TestNetworkPoolOff: with no pool, StartPool makes no network and a task
// creates its own, as it always did.
func TestNetworkPoolOff(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ex := e.startPool(t, 0)
	rec := newRecorder()
	a := e.assign(t, e.sh(holdScript))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	if name, nw := e.networkOf(t, key); name != executor.NetworkName(key) || nw.Labels[executor.LabelTask] != key.TaskID {
		t.Errorf("the task runs on %s labelled %v, want its own %s", name, nw.Labels, executor.NetworkName(key))
	}
	if all, _ := e.poolNetworks(t); len(all) > 0 {
		t.Errorf("pool networks made with the pool off: %v", all)
	}
	if _, err := ex.Inject(a.TaskId, a.Attempt, 1, "done"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, time.Minute)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final status %v", st)
	}
	e.networkGone(t, executor.NetworkName(key))
}
