package executor_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/executor"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// privateEnv is an executor on a Docker engine of the test's own, which the
// test stops, kills and restarts.
type privateEnv struct {
	pe       *dockertest.PrivateEngine
	exec     *executor.Executor
	nodeID   string
	tasksDir string
}

func setupPrivate(t *testing.T) *privateEnv {
	t.Helper()
	return setupPrivateWith(t, dockertest.PrivateConfig{})
}

func setupPrivateWith(t *testing.T, pc dockertest.PrivateConfig) *privateEnv {
	t.Helper()
	pe := dockertest.StartPrivateEngineWith(t, pc)
	p := &privateEnv{pe: pe, nodeID: agenttest.NodeID(t), tasksDir: t.TempDir()}
	ex, err := executor.New(executor.Config{
		Docker:     pe.Client(),
		NodeID:     p.nodeID,
		RunnerPath: agenttest.Runner(t),
		TasksDir:   p.tasksDir,
		Logger:     slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.exec = ex
	// Before the engine's own cleanup (registered first, so run last).
	t.Cleanup(func() {
		for _, k := range ex.Tasks() {
			ex.Cancel(k.TaskID, k.Attempt, "the test is over", time.Second)
		}
		ex.Wait()
	})
	return p
}

// start runs a task that prints and then sleeps, and waits until it has
// printed.
func (p *privateEnv) start(t *testing.T) (*recorder, executor.Key, <-chan struct{}) {
	t.Helper()
	return p.startScript(t, "echo started; sleep 600")
}

// startScript runs a task that prints "started" first, and waits until it
// has printed.
func (p *privateEnv) startScript(t *testing.T, script string) (*recorder, executor.Key, <-chan struct{}) {
	t.Helper()
	rec := newRecorder()
	e := &env{image: dockertest.Image}
	a := e.assign(t, e.sh(script))
	done, err := p.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_RUNNING)
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "started\n")
	return rec, executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}, done
}

// checkEngineStopped checks the terminal status of a task the engine
// stopped: failed for the engine, with no exit code or signal (podium run
// exits 125 for that), and its output kept.
func checkEngineStopped(t *testing.T, rec *recorder, key executor.Key) {
	t.Helper()
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || !strings.HasPrefix(st.GetReason(), executor.ReasonEngineRestarted) {
		t.Fatalf("final status %v, want FAILED with a reason starting %q", st, executor.ReasonEngineRestarted)
	}
	if st.ExitCode != nil || st.GetSignal() != 0 {
		t.Fatalf("final status %v carries an exit code or signal: a client would report the engine's stop as the task's answer", st)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "started\n" {
		t.Fatalf("stdout %q, want %q", got, "started\n")
	}
}

func (p *privateEnv) checkNothingLeft(t *testing.T) {
	t.Helper()
	agenttest.AssertNoContainers(t, p.pe.Client(), p.nodeID)
	if entries, _ := os.ReadDir(p.tasksDir); len(entries) > 0 {
		t.Errorf("%d task directories are left in %s", len(entries), p.tasksDir)
	}
}

// The engine stopped as `systemctl stop docker` stops it, and stays down:
// the task's status says the engine stopped it at once, without waiting for
// the engine; its network and volume, which the engine could not remove as
// it went, are removed once it is back, and only then is the run over.
func TestEngineStoppedUnderATaskFailsItForTheEngineAndTearsDownWhenBack(t *testing.T) {
	t.Parallel()
	p := setupPrivate(t)
	rec, key, done := p.start(t)

	p.pe.Stop(syscall.SIGTERM)
	var st podiumv1.TaskState
	for !isTerminal(st) {
		select {
		case st = <-rec.statusC:
		case <-time.After(2 * time.Minute):
			t.Fatalf("no terminal status within 2 minutes of the engine stopping; statuses %v", rec.statuses())
		}
	}
	checkEngineStopped(t, rec, key)
	select {
	case <-done:
		t.Fatal("the run ended while the engine was down: its network and volume cannot have been removed")
	default:
	}

	p.pe.Start()
	waitDone(t, done, 2*time.Minute)
	p.checkNothingLeft(t)
}

// The engine killed and started again, as after a crash: the container
// outlived the engine, the agent's wait on it broke, and the restarted
// engine stopped it.
func TestEngineKilledAndRestartedUnderATaskFailsItForTheEngine(t *testing.T) {
	t.Parallel()
	p := setupPrivate(t)
	rec, key, done := p.start(t)

	p.pe.Restart(syscall.SIGKILL)
	waitDone(t, done, 2*time.Minute)
	checkEngineStopped(t, rec, key)
	p.checkNothingLeft(t)
}

// A container stopped from outside while the engine keeps running (a person
// at `docker stop`) is not the engine restarting: the task keeps the status
// its process ended with.
func TestContainerStoppedWhileTheEngineRunsKeepsItsOwnStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("echo started; sleep 600"))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "started\n")
	if err := e.docker.ContainerKill(context.Background(), executor.ContainerName(key), "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, time.Minute)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetSignal() != 15 || st.GetExitCode() != 143 ||
		strings.Contains(st.GetReason(), executor.ReasonEngineRestarted) {
		t.Fatalf("final status %v, want FAILED by signal 15 with exit code 143, not blamed on the engine", st)
	}
}

// A network the engine refuses to remove (here: a container that is not the
// task's is still attached to it) is tried again, with a pause between
// tries, until it goes; the run is over only then, and nothing is left.
func TestTeardownIsRetriedUntilTheNetworkCanGo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec := newRecorder()
	a := e.assign(t, e.sh("echo started; sleep 600"))
	key := executor.Key{TaskID: a.TaskId, Attempt: a.Attempt}
	done, err := e.exec.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, rec, podiumv1.LogStream_LOG_STREAM_STDOUT, "started\n")

	ctx := context.Background()
	blocker, err := e.docker.ContainerCreate(ctx, &container.Config{Image: e.image, Cmd: []string{"sleep", "600"},
		Labels: map[string]string{"podium.test": "blocker"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(executor.NetworkName(key))}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	removeBlocker := func() error {
		return e.docker.ContainerRemove(ctx, blocker.ID, container.RemoveOptions{Force: true})
	}
	t.Cleanup(func() { _ = removeBlocker() })
	if err := e.docker.ContainerStart(ctx, blocker.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}

	e.exec.Cancel(a.TaskId, a.Attempt, "user asked", time.Second)
	rec.waitState(t, podiumv1.TaskState_TASK_STATE_CANCELLED)
	select {
	case <-done:
		t.Fatal("the run ended while its network could not be removed")
	default:
	}
	if err := removeBlocker(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 2*time.Minute)
	if st := rec.final(t, key); st.GetState() != podiumv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("final status %v, want CANCELLED", st)
	}
	// setup's cleanup checks that nothing of the node is left.
}

// An engine with live-restore keeps its containers running while it
// restarts: the task goes on, watched again once the engine answers, and
// ends with its own status, not the engine's.
func TestEngineRestartWithLiveRestoreLeavesTheTaskToItsOwnEnd(t *testing.T) {
	t.Parallel()
	p := setupPrivateWith(t, dockertest.PrivateConfig{LiveRestore: true})
	rec, key, done := p.startScript(t, "echo started; while [ ! -e /workspace/go ]; do sleep 0.1; done; echo done; exit 3")

	p.pe.Restart(syscall.SIGTERM)
	// The workspace's files are in the attempt's directory on the host.
	if err := os.WriteFile(filepath.Join(p.tasksDir, attempt.FileName(key), "volume", "go"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 2*time.Minute)
	st := rec.final(t, key)
	if st.GetState() != podiumv1.TaskState_TASK_STATE_FAILED || st.GetExitCode() != 3 || st.GetReason() != "exit code 3" {
		t.Fatalf("final status %v, want FAILED with the task's own exit code 3", st)
	}
	if got := string(rec.output(t, podiumv1.LogStream_LOG_STREAM_STDOUT)); got != "started\ndone\n" {
		t.Fatalf("stdout %q, want %q", got, "started\ndone\n")
	}
	p.checkNothingLeft(t)
}

// An assignment whose image cannot be inspected because the engine cannot
// be reached at all is given back, not failed: nothing of it started, so
// the coordinator places it again without using an attempt. Its reason
// starts "node engine down", and its directory is gone by the time the
// coordinator hears (the same attempt may come back here). No engine is
// needed: the client's socket does not exist.
func TestUnreachableEngineGivesTheAssignmentBack(t *testing.T) {
	t.Parallel()
	dc, err := client.NewClientWithOpts(client.WithHost("unix://"+filepath.Join(t.TempDir(), "docker.sock")),
		client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	tasksDir := t.TempDir()
	ex, err := executor.New(executor.Config{Docker: dc, NodeID: agenttest.NodeID(t), RunnerPath: agenttest.Runner(t),
		TasksDir: tasksDir, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	e := &env{image: dockertest.Image}
	a := e.assign(t, e.sh("echo never"))
	done, err := ex.Start(context.Background(), a, rec.emit)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 30*time.Second)
	evs := rec.all()
	st := evs[len(evs)-1].GetStatus()
	if st.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED || !strings.HasPrefix(st.GetReason(), executor.ReasonEngineDown+": image ") {
		t.Fatalf("statuses %v; want the last QUEUED, the assignment given back with a reason starting %q",
			rec.statuses(), executor.ReasonEngineDown)
	}
	if left, err := os.ReadDir(tasksDir); err != nil || len(left) != 0 {
		t.Fatalf("the tasks directory holds %v (%v); want nothing of the attempt given back", left, err)
	}
}
