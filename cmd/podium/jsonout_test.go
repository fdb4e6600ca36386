package main

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// --json speaks as the flags and tables do, not as protobuf's wire JSON:
// enum values are the lower-case words (`--state provisioning`, `online`), 64-bit
// numbers are numbers, times RFC 3339, a set optional zero is kept and an
// unset field left out, text is not HTML-escaped, and the order is stable.
func TestScriptJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 9, 30, 0, 0, time.UTC)
	zero := int32(0)
	task := &podiumv1.Task{Id: "task_01A", State: podiumv1.TaskState_TASK_STATE_PROVISIONING, ExitCode: &zero,
		Reason: "a <b> & c", CreatedAt: timestamppb.New(at),
		Spec: &podiumv1.TaskSpec{Image: "alpine:3", Env: map[string]string{"B": "2", "A": "1"}, OutputLimitBytes: 1 << 40,
			Resources: &podiumv1.Resources{Cpu: 0.5, MemoryMb: 24105}}}
	b, err := scriptJSON(task)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"task_01A","spec":{"image":"alpine:3","env":{"A":"1","B":"2"},"resources":{"cpu":0.5,"memory_mb":24105},"output_limit_bytes":1099511627776},` +
		`"state":"provisioning","reason":"a <b> & c","exit_code":0,"created_at":"2026-12-07T09:30:00Z"}`
	if string(b) != want {
		t.Errorf("scriptJSON(task) =\n%s\nwant\n%s", b, want)
	}
	if !json.Valid(b) {
		t.Errorf("not valid JSON: %s", b)
	}

	node := &podiumv1.Node{Id: "node_01A", Status: podiumv1.NodeStatus_NODE_STATUS_ONLINE, Capacity: &podiumv1.Capacity{MemoryMb: 24105}}
	b, err = scriptJSON(node)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got["status"] != "online" || got["capacity"].(map[string]any)["memory_mb"] != float64(24105) {
		t.Errorf("scriptJSON(node) = %s, want status online and memory_mb a number", b)
	}

	// Floats JSON has no number for are strings, as protojson writes them.
	b, err = scriptJSON(&podiumv1.Resources{Cpu: math.Inf(1)})
	if err != nil || string(b) != `{"cpu":"Infinity"}` {
		t.Errorf("scriptJSON(cpu +Inf) = %s, %v", b, err)
	}
}
