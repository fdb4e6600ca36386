package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// --gpus, --gpu-model and --gpu-memory reach the submitted spec, over what
// the spec file says; --gpu-memory is a size, kept in MiB rounded up.
func TestRunGPUFlags(t *testing.T) {
	f := newFake(t)
	f.task.State = podiumv1.TaskState_TASK_STATE_SUCCEEDED
	spec := writeFile(t, "task.yaml", "image: alpine:3\nresources:\n  memory_mb: 64\n  gpus: 1\n  gpu_model: \"Tesla*\"\n")
	tc := newTestCLI(nil)
	code := tc.run(t, "--server", f.url(), "run", "--spec", spec, "--gpus", "2", "--gpu-model", "NVIDIA H100*",
		"--gpu-memory", "80GiB", "--", "nvidia-smi", "-L")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, tc.errOut)
	}
	want := &podiumv1.Resources{MemoryMb: 64, Gpus: 2, GpuModel: "NVIDIA H100*", GpuMemoryMb: 81920}
	if !proto.Equal(f.spec.GetResources(), want) {
		t.Errorf("submitted resources:\n got %v\nwant %v", f.spec.GetResources(), want)
	}

	// At least 80 GB (SI) is 76294 MiB and a bit: rounded up, never down.
	o := &runOptions{image: "alpine:3", gpus: 1, gpuMemory: "80GB", set: map[string]bool{"image": true, "gpus": true, "gpu-memory": true}}
	s, err := o.buildSpec(nil)
	if err != nil || s.GetResources().GetGpuMemoryMb() != 76294 {
		t.Errorf("--gpu-memory 80GB = %d MiB (%v), want 76294", s.GetResources().GetGpuMemoryMb(), err)
	}
}

// Each bad GPU flag is refused before anything is sent, saying what to give.
func TestRunGPUFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"too many GPUs", []string{"--gpus", "65"}, "--gpus 65 is out of range: give how many whole GPUs the task needs, 1 to 64"},
		{"negative GPUs", []string{"--gpus", "-1"}, "--gpus -1 is out of range"},
		{"a model without a count", []string{"--gpu-model", "NVIDIA*"}, "--gpu-model and --gpu-memory say which GPUs count: give --gpus N too"},
		{"memory without a count", []string{"--gpu-memory", "16GiB"}, "give --gpus N too"},
		{"a broken pattern", []string{"--gpus", "1", "--gpu-model", "NVIDIA [H100"}, `--gpu-model: "NVIDIA [H100" is not a valid pattern`},
		{"a pattern with a slash", []string{"--gpus", "1", "--gpu-model", "a/b"}, `contains "/", which no GPU's name holds`},
		{"a memory that is no size", []string{"--gpus", "1", "--gpu-memory", "lots"}, "--gpu-memory"},
	} {
		t.Run(tc.name, func(t *testing.T) { runRefusedLocally(t, tc.args, tc.want) })
	}
}

// podium node get lists each GPU with its model, memory and UUID.
func TestNodeGetShowsGPUs(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	f.nodes[0].Gpus = []*podiumv1.Gpu{
		{Index: 0, Uuid: "GPU-11111111-2222-3333-4444-555555555555", Model: "NVIDIA H100 80GB HBM3", MemoryMb: 81559},
		{Index: 1, Uuid: "GPU-66666666-7777-8888-9999-000000000000", Model: "NVIDIA H100 80GB HBM3", MemoryMb: 81559},
	}
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "get", "node_A"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	for _, want := range []string{
		"gpu 0: NVIDIA H100 80GB HBM3, 81559 MiB, GPU-11111111-2222-3333-4444-555555555555",
		"gpu 1: NVIDIA H100 80GB HBM3, 81559 MiB, GPU-66666666-7777-8888-9999-000000000000",
	} {
		if !strings.Contains(strings.Join(strings.Fields(cli.out.String()), " "), want) {
			t.Errorf("node get should show %q:\n%s", want, cli.out)
		}
	}
}

// podium task get shows what the task asks of its GPUs.
func TestTaskGetShowsGPURequest(t *testing.T) {
	f := newFake(t)
	f.task = sampleTasks(time.Now())[0]
	f.task.Id = "task_01GPU"
	f.task.Spec.Resources = &podiumv1.Resources{Cpu: 4, Gpus: 2, GpuModel: "NVIDIA H100*", GpuMemoryMb: 80000}
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "task", "get", "task_01GPU"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := `cpu 4, gpus 2 matching "NVIDIA H100*" with at least 80000 MiB each`; !strings.Contains(cli.out.String(), want) {
		t.Errorf("task get should show %q:\n%s", want, cli.out)
	}
}
