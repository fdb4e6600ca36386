package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// The GPUs simulated nodes report, as nvidia-smi names them.
var (
	gpuT4   = &podiumv1.Gpu{Index: 0, Uuid: "GPU-00000000-0000-0000-0000-0000000000t4", Model: "Tesla T4", MemoryMb: 15360}
	gpuA100 = func(i int32, uuid string) *podiumv1.Gpu {
		return &podiumv1.Gpu{Index: i, Uuid: uuid, Model: "NVIDIA A100-SXM4-40GB", MemoryMb: 40960}
	}
	gpuH100 = func(i int32, uuid string) *podiumv1.Gpu {
		return &podiumv1.Gpu{Index: i, Uuid: uuid, Model: "NVIDIA H100 80GB HBM3", MemoryMb: 81559}
	}
)

func gpuSpec(n int32, model string, memMB int64) *podiumv1.TaskSpec {
	return &podiumv1.TaskSpec{Image: "busybox", Command: []string{"nvidia-smi", "-L"},
		Resources: &podiumv1.Resources{Gpus: n, GpuModel: model, GpuMemoryMb: memMB}}
}

// runTo has the simulated node report the task provisioning, running and,
// when exit is not nil, ended with that code.
func runTo(t *testing.T, n *simNode, task string, attempt int32, exit *int32) {
	t.Helper()
	n.send(t, status(task, attempt, 1, podiumv1.TaskState_TASK_STATE_PROVISIONING, nil),
		status(task, attempt, 2, podiumv1.TaskState_TASK_STATE_RUNNING, nil))
	if exit != nil {
		n.send(t, status(task, attempt, 3, podiumv1.TaskState_TASK_STATE_SUCCEEDED, exit))
	}
}

// Two tasks of one GPU each on a node with one GPU and slots to spare never
// run at once: the second waits, saying no node has a free GPU, until the
// first ends, and only then is it assigned. node_health and the admin API
// show the node's GPU and whether it is free.
func TestTwoOneGPUTasksNeverShareANodesOneGPU(t *testing.T) {
	t.Parallel()
	r, db := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	health := func(id string) (gpus, free int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "select gpus, free_gpus from podium.node_health where node = $1", id).Scan(&gpus, &free); err != nil {
			t.Fatal(err)
		}
		return gpus, free
	}

	id, key := enroll(t, r)
	node := connectWith(t, ctx, r, id, key, &podiumv1.Capacity{MaxTasks: 4, Gpus: []*podiumv1.Gpu{gpuT4}})
	if g, f := health(id); g != 1 || f != 1 {
		t.Fatalf("node_health shows %d GPUs, %d free; want 1 and 1 for a node that reported one GPU and runs nothing", g, f)
	}

	first := submit(t, ctx, r, gpuSpec(1, "", 0))
	second := submit(t, ctx, r, gpuSpec(1, "", 0))
	a := assignOf(t, node)
	if a.TaskId != first {
		t.Fatalf("the node was assigned %s first, want %s (the older)", a.TaskId, first)
	}
	runTo(t, node, first, a.Attempt, nil)
	// The node has three free slots, but no free GPU.
	waitReason(t, ctx, r, second, "no connected node has 1 free GPU (largest: 0)")
	if g, f := health(id); g != 1 || f != 0 {
		t.Errorf("node_health shows %d GPUs, %d free while a task holds the one GPU; want 1 and 0", g, f)
	}
	if tk := getTask(t, ctx, r, second); tk.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("the second task is %s while the first holds the node's only GPU, want queued", tk.GetState())
	}

	nodes, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if gs := nodes.Msg.GetNodes()[0].GetGpus(); len(gs) != 1 || gs[0].GetUuid() != gpuT4.Uuid || gs[0].GetModel() != "Tesla T4" || gs[0].GetMemoryMb() != 15360 {
		t.Errorf("the admin API shows the node's GPUs as %v, want the T4 its Hello reported", gs)
	}

	zero := int32(0)
	node.send(t, status(first, a.Attempt, 3, podiumv1.TaskState_TASK_STATE_SUCCEEDED, &zero))
	waitState(t, ctx, r, first, podiumv1.TaskState_TASK_STATE_SUCCEEDED)
	if b := assignOf(t, node); b.TaskId != second {
		t.Fatalf("after the first task ended the node was assigned %s, want %s", b.TaskId, second)
	}
	if tk := getTask(t, ctx, r, second); tk.GetNodeId() != id || tk.GetReason() != "" {
		t.Errorf("the second task is on %q with reason %q, want on %s with its reason cleared", tk.GetNodeId(), tk.GetReason(), id)
	}
}

// gpu_model and gpu_memory_mb choose among the nodes' GPUs: a task goes only
// to a node with enough GPUs matching both, a task no node can ever serve
// is unschedulable and says what it asks for, a task asking more GPUs than
// any node has says the most there are, and GPUs a node reports in a later heartbeat (an
// operator added some and sent the agent SIGHUP) are placed at once.
func TestGPUModelAndMemoryChooseTheNode(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t4ID, t4Key := enroll(t, r)
	t4Node := connectWith(t, ctx, r, t4ID, t4Key, &podiumv1.Capacity{MaxTasks: 8, Gpus: []*podiumv1.Gpu{gpuT4}})
	a100ID, a100Key := enroll(t, r)
	a100Node := connectWith(t, ctx, r, a100ID, a100Key, &podiumv1.Capacity{MaxTasks: 8,
		Gpus: []*podiumv1.Gpu{gpuA100(0, "GPU-a100-0"), gpuA100(1, "GPU-a100-1")}})

	h100 := submit(t, ctx, r, gpuSpec(1, "NVIDIA H100*", 80000))
	waitReason(t, ctx, r, h100, `cannot run on any node: no node has a GPU matching "NVIDIA H100*" with at least 80000 MiB`)

	big := submit(t, ctx, r, gpuSpec(1, "", 40000))
	if a := assignOf(t, a100Node); a.TaskId != big {
		t.Fatalf("the A100 node was assigned %s, want %s, the task needing 40000 MiB per GPU", a.TaskId, big)
	}
	runTo(t, a100Node, big, 1, nil)
	tesla := submit(t, ctx, r, gpuSpec(1, "Tesla*", 0))
	if a := assignOf(t, t4Node); a.TaskId != tesla {
		t.Fatalf("the T4 node was assigned %s, want %s, the task asking for a Tesla", a.TaskId, tesla)
	}
	runTo(t, t4Node, tesla, 1, nil)

	three := submit(t, ctx, r, gpuSpec(3, "", 0))
	waitReason(t, ctx, r, three, "cannot run on any node: it asks for 3 GPUs and the most a node has is 2")

	// The T4 node gains two H100s: its heartbeat carries the new list, and
	// the waiting H100 task goes there (its T4 is held, its H100s are not).
	gpus := []*podiumv1.Gpu{gpuT4, gpuH100(1, "GPU-h100-1"), gpuH100(2, "GPU-h100-2")}
	if err := t4Node.stream.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
		Capacity: &podiumv1.Capacity{MaxTasks: 8, Gpus: gpus}, RunningTasks: 1}}}); err != nil {
		t.Fatal(err)
	}
	if a := assignOf(t, t4Node); a.TaskId != h100 {
		t.Fatalf("after its heartbeat reported two H100s the node was assigned %s, want %s", a.TaskId, h100)
	}
	n, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range n.Msg.GetNodes() {
		if nd.GetId() == t4ID && len(nd.GetGpus()) != 3 {
			t.Errorf("the admin API shows %d GPUs on the node after its heartbeat reported 3", len(nd.GetGpus()))
		}
	}
	if tk := getTask(t, ctx, r, three); tk.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED {
		t.Errorf("the task asking for 3 GPUs is %s, want still queued: no node has 3 free", tk.GetState())
	}
}

// A spec asking for GPUs in a way no node could honour is refused at submit
// with the field named, and nothing is stored.
func TestSubmitRefusesBadGPUFields(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		r    *podiumv1.Resources
		want string
	}{
		{&podiumv1.Resources{Gpus: 65}, "spec.resources.gpus: 65 is more than 64 GPUs"},
		{&podiumv1.Resources{GpuModel: "NVIDIA*"}, "spec.resources.gpu_model: is set but gpus is 0"},
		{&podiumv1.Resources{Gpus: 1, GpuModel: "NVIDIA [H100"}, "spec.resources.gpu_model"},
		{&podiumv1.Resources{Gpus: 1, GpuMemoryMb: -5}, "spec.resources.gpu_memory_mb: -5 is negative"},
	} {
		_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox", Resources: tc.r}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !contains(err.Error(), tc.want) {
			t.Errorf("Submit(resources %v) = %v, want invalid argument saying %q", tc.r, err, tc.want)
		}
	}
	list, err := r.Tasks().List(ctx, connect.NewRequest(&podiumv1.ListRequest{}))
	if err != nil || len(list.Msg.GetTasks()) != 0 {
		t.Errorf("List after refused submits: %d tasks (%v), want none stored", len(list.Msg.GetTasks()), err)
	}
}
