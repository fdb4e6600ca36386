package integration_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Container options out of their bounds are refused by the API with the
// field named and what to do, and nothing is stored.
func TestSubmitBadContainerOptionsIsRefused(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		spec  *podiumv1.TaskSpec
		field string
		says  string
	}{
		{"shm_size without a unit", &podiumv1.TaskSpec{Image: "busybox", ShmSizeBytes: 64}, "spec.shm_size_bytes", "did you leave out the unit?"},
		{"a ulimit that raises priority", &podiumv1.TaskSpec{Image: "busybox", Ulimits: []*podiumv1.Ulimit{{Name: "rtprio", Soft: 99, Hard: 99}}},
			"spec.ulimits[0].name", "may not be set"},
		{"a hard limit below the soft", &podiumv1.TaskSpec{Image: "busybox", Ulimits: []*podiumv1.Ulimit{{Name: "nofile", Soft: 4096, Hard: 1024}}},
			"spec.ulimits[0].hard", "below its soft limit"},
		{"a tmpfs over the workspace", &podiumv1.TaskSpec{Image: "busybox", Tmpfs: []*podiumv1.TmpfsMount{{Path: "/workspace/cache"}}},
			"spec.tmpfs[0].path", "over /workspace, which Podium mounts into every task itself"},
		{"a tmpfs at the root", &podiumv1.TaskSpec{Image: "busybox", Tmpfs: []*podiumv1.TmpfsMount{{Path: "/"}}}, "spec.tmpfs[0].path", "root directory"},
		{"a tmpfs of 2 TiB", &podiumv1.TaskSpec{Image: "busybox", Tmpfs: []*podiumv1.TmpfsMount{{Path: "/c", SizeBytes: 2 << 40}}},
			"spec.tmpfs[0].size_bytes", "more than 1 TiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: tc.spec}))
			wantRefused(t, tc.name, err, tc.field, tc.says)
		})
	}
	if n := taskCount(t, ctx, r); n != 0 {
		t.Fatalf("refused submits stored %d tasks", n)
	}
}

// helloPrivileged connects a simulated node whose Hello says whether its
// agent runs privileged sidecars (podium-agent --allow-privileged-sidecars).
func helloPrivileged(t *testing.T, ctx context.Context, r *coordtest.Replica, id, key string, allow bool) *simNode {
	t.Helper()
	st := r.NodeClient().Stream(ctx)
	if err := st.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Hello{Hello: &podiumv1.Hello{
		NodeId: id, NodeKey: key, Hostname: "sim", Capacity: &podiumv1.Capacity{MaxTasks: 4}, AllowPrivilegedSidecars: allow}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Receive(); err != nil || m.GetHelloAck() == nil {
		t.Fatalf("waiting for the HelloAck: %v, %v", m, err)
	}
	return &simNode{id: id, key: key, stream: st}
}

// A task with a privileged sidecar is never given to a node whose agent does
// not allow them: it waits, saying which flag would let a node take it, while
// that node takes ordinary work, and goes to the first node that allows
// them once one connects. The admin API shows which nodes do.
func TestPrivilegedSidecarsGoOnlyToNodesThatAllowThem(t *testing.T) {
	t.Parallel()
	r, _ := coordtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	plainID, plainKey := enroll(t, r)
	plain := helloPrivileged(t, ctx, r, plainID, plainKey, false)

	dind := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "docker:cli", Command: []string{"docker", "build", "/workspace"},
		Env: map[string]string{"DOCKER_HOST": "tcp://docker:2375"},
		Sidecars: []*podiumv1.Sidecar{{Name: "docker", Image: "docker:dind", Privileged: true, ShareWorkspace: true,
			Readiness: &podiumv1.Readiness{TcpPort: 2375}}}})
	waitReason(t, ctx, r, dind, "cannot run on any node: no node allows privileged sidecars (start the agent with --allow-privileged-sidecars)")

	// The node has room, and takes the next ordinary task: its first
	// assignment is that one, never the waiting task.
	ordinary := submit(t, ctx, r, &podiumv1.TaskSpec{Image: "busybox",
		Sidecars: []*podiumv1.Sidecar{{Name: "files", Image: "busybox", ShareWorkspace: true}}})
	if a := assignOf(t, plain); a.GetTaskId() != ordinary {
		t.Fatalf("the node without --allow-privileged-sidecars was assigned %s, want %s (the task with a privileged sidecar must wait)", a.GetTaskId(), ordinary)
	}
	if tk := getTask(t, ctx, r, dind); tk.GetState() != podiumv1.TaskState_TASK_STATE_QUEUED || tk.GetNodeId() != "" {
		t.Fatalf("the task with a privileged sidecar is %s on %q, want queued on no node", tk.GetState(), tk.GetNodeId())
	}

	privID, privKey := enroll(t, r)
	priv := helloPrivileged(t, ctx, r, privID, privKey, true)
	a := assignOf(t, priv)
	if a.GetTaskId() != dind {
		t.Fatalf("the node that allows privileged sidecars was assigned %s, want %s", a.GetTaskId(), dind)
	}
	if sc := a.GetSpec().GetSidecars(); len(sc) != 1 || !sc[0].GetPrivileged() || !sc[0].GetShareWorkspace() {
		t.Errorf("the assignment's sidecars are %v, want the privileged, workspace-sharing one as submitted", sc)
	}
	if tk := getTask(t, ctx, r, dind); tk.GetNodeId() != privID || tk.GetReason() != "" {
		t.Errorf("the task is on %q with reason %q, want on %s with its reason cleared", tk.GetNodeId(), tk.GetReason(), privID)
	}

	nodes, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes.Msg.GetNodes() {
		seen[n.GetId()] = n.GetAllowPrivilegedSidecars()
	}
	if len(seen) != 2 || seen[plainID] || !seen[privID] {
		t.Errorf("the admin API shows allow_privileged_sidecars %v, want false for %s and true for %s", seen, plainID, privID)
	}
}
