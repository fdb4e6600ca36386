package executor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
	"github.com/podiumhq/podium/test/testenv/wait"
)

// newExecutorCfg is newExecutor with changes to its Config.
func (e *env) newExecutorCfg(change func(*executor.Config)) *executor.Executor {
	cfg := executor.Config{
		Docker:     e.docker,
		NodeID:     e.nodeID,
		RunnerPath: agenttest.Runner(e.t),
		TasksDir:   e.tasksDir,
		Logger:     slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{e.t}, e.logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Limits:     e.limits,
	}
	change(&cfg)
	ex, err := executor.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.execs = append(e.execs, ex)
	return ex
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// An attempt's directory stays until the coordinator has stored its
// terminal status (the acknowledgement), then goes; and the run is not over
// for the executor until then. The images it used are told as it starts
// and as it ends, and its end is told after its status.
func TestAttemptDataGoesOnceTheStatusIsStored(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var stored atomic.Bool
	var imageUses, ended atomic.Int64
	ex := e.newExecutorCfg(func(c *executor.Config) {
		c.Stored = func(executor.Key, uint64) bool { return stored.Load() }
		c.ImageUsed = func(id string) {
			if id != "" {
				imageUses.Add(1)
			}
		}
		c.Ended = func() { ended.Add(1) }
	})
	rec := newRecorder()
	a := e.assign(t, e.sh("echo hi"))
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	dir := filepath.Join(e.tasksDir, attempt.FileName(attempt.Of(a)))
	wait.For(t, 30*time.Second, "the run to tell that it ended", func() bool { return ended.Load() == 1 })
	if !exists(filepath.Join(dir, "output.log")) {
		t.Fatal("the attempt's runner log is gone before the coordinator stored its terminal status")
	}
	// A sweep leaves it too: the run still holds it.
	if removed, err := ex.SweepAttemptData(); err != nil || len(removed) > 0 {
		t.Fatalf("a sweep removed %v (%v) while the run waits for its status to be stored", removed, err)
	}
	select {
	case <-done:
		t.Fatal("the run was over before its terminal status was stored")
	default:
	}
	stored.Store(true)
	wait.Closed(t, 30*time.Second, "the run to end once its status is stored", done)
	if exists(dir) {
		t.Fatalf("%s is still there after the acknowledgement", dir)
	}
	if n := imageUses.Load(); n != 2 {
		t.Errorf("the image's use was told %d times, want at the start and at the end", n)
	}
}

// With --keep-attempt-data the directory of a finished attempt stays that
// long, also across an agent restart (RemoveOrphans at start keeps it), and
// a sweep removes it once it has passed.
func TestKeepAttemptData(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const keep = 2 * time.Second
	ex := e.newExecutorCfg(func(c *executor.Config) { c.KeepAttemptData = keep })
	if got := ex.SweepInterval(); got != keep {
		t.Errorf("sweep interval %s, want %s for a keep that short", got, keep)
	}
	rec := newRecorder()
	a := e.assign(t, e.sh("echo kept"))
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 60*time.Second)
	key := attempt.Of(a)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("final %v", st)
	}
	dir := filepath.Join(e.tasksDir, attempt.FileName(key))
	mark, err := os.Lstat(filepath.Join(dir, "done"))
	if err != nil || !exists(filepath.Join(dir, "output.log")) {
		t.Fatalf("%s is not kept, marked done, after the attempt ended (%v)", dir, err)
	}
	ended := mark.ModTime()
	next := e.newExecutorCfg(func(c *executor.Config) { c.KeepAttemptData = keep })
	if err := next.RemoveOrphans(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(ended) < keep && !exists(dir) {
		t.Fatal("a restarted agent removed the kept directory before --keep-attempt-data passed")
	}
	wait.For(t, 30*time.Second, "a sweep to remove the directory once it is older than --keep-attempt-data", func() bool {
		removed, err := next.SweepAttemptData()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(removed, dir)
	})
	if time.Since(ended) < keep {
		t.Fatal("the directory went before --keep-attempt-data passed")
	}
}

// The sweep removes this node's labelled networks and volumes that no
// attempt holds, and leaves another node's that are younger than
// DanglingAge (an agent beside this one may be about to use them) and those
// of an attempt still running here.
func TestSweepDangling(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	name := func(s string) string { return fmt.Sprintf("podium-sweep-%d-%s-%s", os.Getpid(), e.nodeID, s) }
	mine := map[string]string{executor.LabelTask: "t-dangling", executor.LabelAttempt: "1", executor.LabelNode: e.nodeID}
	otherNode := agenttest.NodeID(t)
	other := map[string]string{executor.LabelTask: "t-other", executor.LabelAttempt: "1", executor.LabelNode: otherNode}
	t.Cleanup(func() { dockertest.RemoveAllFor(e.docker, "podium.node="+otherNode) })
	for _, o := range []struct {
		suffix string
		labels map[string]string
	}{{"mine", mine}, {"other", other}} {
		if _, err := e.docker.NetworkCreate(ctx, name(o.suffix), network.CreateOptions{Labels: o.labels}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.docker.VolumeCreate(ctx, volume.CreateOptions{Name: name(o.suffix), Labels: o.labels}); err != nil {
			t.Fatal(err)
		}
	}
	// A running task of this node keeps its network and volume.
	rec := newRecorder()
	a := e.assign(t, e.sh("echo up; sleep 600"))
	done, err := e.exec.Start(ctx, a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)

	removed, err := e.exec.SweepDangling(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{name("mine"), name("mine")}; !slices.Equal(removed, want) {
		t.Fatalf("swept %v, want this node's dangling network and volume, %s", removed, name("mine"))
	}
	if left, err := dockertest.LeftFor(ctx, e.docker, "podium.node="+otherNode); err != nil || len(left) != 2 {
		t.Fatalf("another node's young network and volume: %v (%v), want both left", left, err)
	}
	if left, err := dockertest.LeftFor(ctx, e.docker, executor.LabelTask+"="+a.TaskId); err != nil || len(left) != 3 {
		t.Fatalf("the running task's objects: %v (%v), want its container, network and volume left", left, err)
	}
	e.exec.Cancel(a.TaskId, a.Attempt, "the test is over", time.Second)
	waitDone(t, done, 60*time.Second)
}
