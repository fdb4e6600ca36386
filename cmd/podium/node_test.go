package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fleet is two nodes: node_A online and busy, node_B offline and idle.
func fleet(now time.Time) []*podiumv1.Node {
	return []*podiumv1.Node{
		{Id: "node_A", Hostname: "box1", Status: podiumv1.NodeStatus_NODE_STATUS_ONLINE, Labels: []string{"linux", "gpu=a100"},
			Capacity: &podiumv1.Capacity{CpuCores: 16, MemoryMb: 65536, DiskFreeMb: 1024, MaxTasks: 8,
				Limits: &podiumv1.TaskLimits{MaxMemoryMb: 4096, MaxPids: 1000, MaxTimeoutSeconds: 3600, PermitEgress: []string{"10.0.0.0/8"}}},
			RunningTasks: 2, FreeSlots: 6, Replica: "coord-1", AllowPrivilegedSidecars: true,
			LastHeartbeatAt: timestamppb.New(now.Add(-5 * time.Second)), EnrolledAt: timestamppb.New(now.Add(-72 * time.Hour))},
		{Id: "node_B", Hostname: "box2", Status: podiumv1.NodeStatus_NODE_STATUS_OFFLINE, Capacity: &podiumv1.Capacity{MaxTasks: 8}},
	}
}

func TestNodeGet(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	f.nodes[0].Draining = true
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "get", "node_A"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	out := cli.out.String()
	for _, want := range []string{
		"id:", "node_A", "hostname:", "box1", "status:", "online", "draining:", "yes",
		"labels:", "linux, gpu=a100", "running:", "2", "free slots:", "max tasks:", "8",
		"cpu cores:", "16", "memory:", "65536 MiB", "disk free:", "1024 MiB", "replica:", "coord-1",
		"task limits:", "at most memory 4096 MiB, pids 1000, timeout 1h0m0s, egress to 10.0.0.0/8",
		"privileged sidecars:", "allowed (podium-agent --allow-privileged-sidecars)",
		"last heartbeat:", "(5s ago)", "enrolled:", "(3d ago)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("node get should show %q:\n%s", want, out)
		}
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "get", "node_B"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if out := cli.out.String(); !strings.Contains(out, "last heartbeat: never") || strings.Contains(out, "draining") || strings.Contains(out, "labels") ||
		strings.Contains(out, "task limits") || strings.Contains(out, "privileged") {
		t.Errorf("node get node_B:\n%s", out)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "get", "node_A", "--json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(cli.out.String()), &obj); err != nil || obj["id"] != "node_A" || obj["running_tasks"] != float64(2) {
		t.Errorf("--json = %v (%v):\n%s", obj, err, cli.out)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "get", "node_NOPE"); code != exitPodium || cli.errOut.String() != "podium: no node node_NOPE (podium nodes lists them)\n" {
		t.Errorf("unknown node: exit %d, stderr %q", code, cli.errOut)
	}
	if cli.out.String() != "" {
		t.Errorf("stdout = %q", cli.out)
	}
}

func TestNodeDrainAndUndrain(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "drain", "node_A"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A is draining: it takes no new tasks, and the ones it runs finish (online, draining, 2 running, 0 of 8 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}
	if cli.errOut.String() != "" {
		t.Errorf("stderr = %q", cli.errOut)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "undrain", "node_A"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A takes new tasks again (online, 2 running, 6 of 8 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}
	if got := fmt.Sprintf("%d %s %v %v", len(f.drains), f.drains[0].GetNodeId(), f.drains[0].GetDraining(), f.drains[1].GetDraining()); got != "2 node_A true false" {
		t.Errorf("DrainNode requests: %s", got)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "drain", "node_NOPE"); code != exitUsage || cli.errOut.String() != "podium: no node node_NOPE (podium nodes lists them)\n" {
		t.Errorf("unknown node: exit %d, stderr %q", code, cli.errOut)
	}
}

func TestNodeSlots(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "slots", "node_A", "3"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A runs at most 3 tasks at once (online, 2 running, 1 of 3 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "slots", "node_A", "0"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A is back to its own max of 8 tasks at once (online, 2 running, 6 of 8 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}
	if got := fmt.Sprintf("%s %d %d", f.slotReqs[0].GetNodeId(), f.slotReqs[0].GetMaxTasks(), f.slotReqs[1].GetMaxTasks()); got != "node_A 3 0" {
		t.Errorf("SetNodeSlots requests: %s", got)
	}

	// The coordinator's own bound is its to tell.
	f.err = connect.NewError(connect.CodeInvalidArgument, errors.New("max_tasks: want 0 (the node's own number) to 10000"))
	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "slots", "node_A", "20000"); code != exitPodium || cli.errOut.String() != "podium: max_tasks: want 0 (the node's own number) to 10000\n" {
		t.Errorf("refused: exit %d, stderr %q", code, cli.errOut)
	}
}

func TestNodeLabel(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "label", "node_A", "--add", "zone=eu", "--remove", "gpu=a100", "--add", "ssd"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A has the labels linux, zone=eu, ssd (online, 2 running, 6 of 8 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}
	if r := f.labelReq[0]; fmt.Sprintf("%s %v %v", r.GetNodeId(), r.GetAdd(), r.GetRemove()) != "node_A [zone=eu ssd] [gpu=a100]" {
		t.Errorf("SetNodeLabels request = %v", r)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "label", "--remove", "linux", "--remove", "zone=eu", "node_A", "--remove", "ssd"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if want := "node node_A has no labels (online, 2 running, 6 of 8 slots free)\n"; cli.out.String() != want {
		t.Errorf("stdout = %q, want %q", cli.out, want)
	}
}

func TestNodeRm(t *testing.T) {
	f := newFake(t)
	f.nodes = fleet(time.Now())
	// Online and not drained: refused, with the coordinator's advice.
	cli := newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rm", "node_A"); code != exitPodium {
		t.Errorf("exit %d, want 125", code)
	}
	if want := "podium: node node_A cannot be removed: it is online and not drained; run `podium node drain node_A` first, or stop its agent\n"; cli.errOut.String() != want {
		t.Errorf("stderr = %q, want %q", cli.errOut, want)
	}
	if cli.out.String() != "" {
		t.Errorf("stdout = %q", cli.out)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rm", "node_B"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cli.errOut)
	}
	if cli.out.String() != "node node_B removed\n" {
		t.Errorf("stdout = %q", cli.out)
	}
	if len(f.nodes) != 1 || len(f.removes) != 2 || f.removes[1].GetNodeId() != "node_B" {
		t.Errorf("nodes %v, RemoveNode requests %v", f.nodes, f.removes)
	}

	cli = newTestCLI(map[string]string{"PODIUM_SERVER": f.url()})
	if code := cli.run(t, "node", "rm", "node_B"); code != exitUsage || cli.errOut.String() != "podium: no node node_B (podium nodes lists them)\n" {
		t.Errorf("removed twice: exit %d, stderr %q", code, cli.errOut)
	}
}
