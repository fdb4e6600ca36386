package executor

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/agent/gpu"
	"github.com/podiumhq/podium/agent/internal/agenttest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/dockertest"
)

// fakeGPUs are n GPUs as a discovery would list them. This machine has no
// NVIDIA GPU: they stand in for real ones, and only their UUIDs matter here.
func fakeGPUs(n int) []gpu.GPU {
	var gs []gpu.GPU
	for i := range n {
		gs = append(gs, gpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i),
			Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559})
	}
	return gs
}

// registerGPURun enters an attempt of spec in e the way Start does, up to its
// GPUs and its host directory, without starting it; the cleanup removes what
// the test made of it.
func registerGPURun(t *testing.T, e *Executor, key Key, spec *podiumv1.TaskSpec, fresh bool) *run {
	t.Helper()
	a := &podiumv1.Assign{TaskId: key.TaskID, Attempt: key.Attempt, Spec: spec}
	r, err := e.register(context.Background(), a, func(*podiumv1.TaskEvent, *attempt.Cursor) {}, attempt.Cursor{}, !fresh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.teardown(context.Background()); err != nil {
			t.Errorf("teardown: %v", err)
		}
		r.releaseGPUs()
		e.mu.Lock()
		delete(e.runs, r.key)
		e.mu.Unlock()
		r.prepCancel()
		e.wg.Done()
	})
	if !fresh {
		return r
	}
	r.takeGPUs()
	if st := r.validate(); st != nil {
		t.Fatalf("validate: %v", st)
	}
	if err := r.prepareDir(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.removeDir)
	if err := r.recordGPUs(); err != nil {
		t.Fatal(err)
	}
	return r
}

// On the real engine: the task's container is created with a device request
// for exactly the GPUs the attempt was given, and NVIDIA_VISIBLE_DEVICES
// naming them, whatever the spec's env said. The container cannot start
// here: the start needs the NVIDIA container runtime, which this machine
// (and CI) lacks, so the test inspects the container after create, and checks
// that the start fails rather than running a task without its GPUs.
// `make gpu-check` (scripts/gpu-check.sh) is the same check on a GPU node,
// end to end.
//
// Then adoption: a second executor (the next agent process) with a fresh
// allocator holds the same GPUs again, from the attempt's record, and, with
// no record, from the container's device request.
func TestTaskContainerGetsADeviceRequestForExactlyItsGPUs(t *testing.T) {
	t.Parallel()
	dc := dockertest.Client(t)
	image := dockertest.EnsureImage(t)
	nodeID := agenttest.NodeID(t)
	tasksDir := t.TempDir()
	t.Cleanup(func() { agenttest.AssertNoContainers(t, dc, nodeID) })
	newExec := func(alloc *gpu.Allocator) *Executor {
		e, err := New(Config{Docker: dc, NodeID: nodeID, RunnerPath: agenttest.Runner(t), TasksDir: tasksDir, GPUs: alloc})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	alloc := gpu.NewAllocator()
	alloc.Set(fakeGPUs(4))
	// GPU 0 is another running attempt's: this one must not get it.
	if _, err := alloc.Take("other/1", gpu.Request{N: 1}); err != nil {
		t.Fatal(err)
	}
	e := newExec(alloc)
	key := Key{TaskID: fmt.Sprintf("t-gpu-%d", os.Getpid()), Attempt: 1}
	spec := &podiumv1.TaskSpec{
		Image: image, Command: []string{"nvidia-smi", "-L"},
		// A spec cannot widen what it is given.
		Env:       map[string]string{VisibleDevicesEnv: "all"},
		Resources: &podiumv1.Resources{Gpus: 2, GpuModel: "NVIDIA H100*"},
		Sidecars:  []*podiumv1.Sidecar{{Name: "db", Image: image}},
	}
	r := registerGPURun(t, e, key, spec, true)
	want := []string{fakeGPUs(4)[1].UUID, fakeGPUs(4)[2].UUID}
	if held := alloc.Held(key.String()); !slices.Equal(held, want) {
		t.Fatalf("the attempt holds %v, want GPUs 1 and 2 (%v)", held, want)
	}
	if _, err := r.createNetwork(); err != nil {
		t.Fatal(err)
	}
	if err := r.createVolume(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := r.createContainer(ctx, r.taskContainer(spec.GetCommand()))
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	wantReq := []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: want, Capabilities: [][]string{{"gpu"}}}}
	if got := info.HostConfig.DeviceRequests; len(got) != 1 || got[0].Driver != wantReq[0].Driver ||
		!slices.Equal(got[0].DeviceIDs, want) || len(got[0].Capabilities) != 1 || !slices.Equal(got[0].Capabilities[0], []string{"gpu"}) {
		t.Fatalf("the created container's HostConfig.DeviceRequests = %+v, want %+v", got, wantReq)
	}
	var visible []string
	for _, kv := range info.Config.Env {
		if v, ok := strings.CutPrefix(kv, VisibleDevicesEnv+"="); ok {
			visible = append(visible, v)
		}
	}
	if !slices.Equal(visible, []string{strings.Join(want, ",")}) {
		t.Fatalf("%s in the container's env: %q, want exactly %q", VisibleDevicesEnv, visible, strings.Join(want, ","))
	}
	// No NVIDIA container runtime here (nor real GPUs of these UUIDs
	// anywhere): the engine refuses to start it.
	if err := dc.ContainerStart(ctx, id, container.StartOptions{}); err == nil {
		t.Fatal("a container asking for GPUs that do not exist started")
	} else {
		t.Logf("start refused, as expected without the NVIDIA runtime: %v", err)
	}

	// A sidecar of the attempt sees no GPU, whatever its image says.
	sc := r.sidecarContainer(spec.GetSidecars()[0], []string{"true"})
	r.withGPUs(&sc)
	if len(sc.host.DeviceRequests) != 0 || !slices.Contains(sc.cfg.Env, VisibleDevicesEnv+"="+noGPU) {
		t.Fatalf("sidecar: device requests %v, env %v; want none and %s=%s", sc.host.DeviceRequests, sc.cfg.Env, VisibleDevicesEnv, noGPU)
	}

	// The next agent process: its allocator knows nothing yet.
	alloc2 := gpu.NewAllocator()
	alloc2.Set(fakeGPUs(4))
	e2 := newExec(alloc2)
	r2 := registerGPURun(t, e2, key, spec, false)
	r2.restoreGPUs(&info)
	if held := alloc2.Held(key.String()); !slices.Equal(held, want) {
		t.Fatalf("after a restart the adopted attempt holds %v, want %v", held, want)
	}
	if got, err := alloc2.Take("next/1", gpu.Request{N: 2}); err != nil || slices.Contains(want, got[0].UUID) || slices.Contains(want, got[1].UUID) {
		t.Fatalf("a new attempt next to the adopted one got %v (%v), want the other two", got, err)
	}
	// Without its record, the container's device request says the same.
	if err := os.Remove(r.dir + "/" + gpusFile); err != nil {
		t.Fatal(err)
	}
	alloc3 := gpu.NewAllocator()
	e3 := newExec(alloc3)
	r3 := registerGPURun(t, e3, Key{TaskID: key.TaskID, Attempt: key.Attempt}, spec, false)
	r3.restoreGPUs(&info)
	if held := alloc3.Held(key.String()); !slices.Equal(held, want) {
		t.Fatalf("restored from the container alone: %v, want %v", held, want)
	}
}

// The record of an attempt's GPUs is read back only as what it must be.
func TestRecordedGPUsReadsOnlyAWellFormedRecord(t *testing.T) {
	t.Parallel()
	for what, content := range map[string]string{
		"not JSON":       "GPU-00000000-0000-0000-0000-000000000000",
		"not a UUID":     `{"uuids":["all"]}`,
		"past its bound": `{"uuids":["` + strings.Repeat("x", maxGPUsRecord) + `"]}`,
	} {
		r := &run{dir: t.TempDir()}
		if err := os.WriteFile(r.dir+"/"+gpusFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := r.recordedGPUs(); err == nil {
			t.Errorf("%s read back as %v", what, got)
		}
	}
	r := &run{dir: t.TempDir()}
	if got, err := r.recordedGPUs(); err != nil || got != nil {
		t.Fatalf("no record: %v, %v; want no GPUs", got, err)
	}
	if err := os.Symlink("/dev/zero", r.dir+"/"+gpusFile); err != nil {
		t.Fatal(err)
	}
	if got, err := r.recordedGPUs(); err == nil {
		t.Fatalf("a link read back as %v", got)
	}
}
