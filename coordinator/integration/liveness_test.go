package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/watchdog"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// A node whose stream keeps delivering a task's output is reachable, even when
// its heartbeats are stuck behind that output: an agent under a flooding task
// on a busy machine sends its heartbeat into the same stream as the log
// chunks, and the replica reads them in order, so the heartbeat arrives late
// while the output does not stop. The fault test that found it
// (test/faults TestFloodingTaskKeepsItsNodeOnline) saw the node marked
// unreachable 58 s into the flood on a loaded machine, with chunks arriving
// all along. Here the simulated node heartbeats once, then sends only output
// for three times the offline threshold: it must stay online throughout, and
// once it falls silent the watchdog must still find it unreachable.
func TestNodeDeliveringOutputStaysOnline(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	const unreachable, offline = 1500 * time.Millisecond, 3 * time.Second
	r := coordtest.Start(t, db.URL, coordtest.Options{
		Nodes:    nodes.Config{HeartbeatInterval: 300 * time.Millisecond, FlushInterval: 100 * time.Millisecond},
		Watchdog: watchdog.Config{Interval: 100 * time.Millisecond, UnreachableAfter: unreachable, OfflineAfter: offline},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, key := enroll(t, r)
	node, _ := connectNode(t, ctx, r, id, key)
	beat := func() {
		if err := node.stream.Send(&podiumv1.StreamRequest{Msg: &podiumv1.StreamRequest_Heartbeat{Heartbeat: &podiumv1.Heartbeat{
			Capacity: &podiumv1.Capacity{MaxTasks: 2}, RunningTasks: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	sub, err := r.Tasks().Submit(ctx, connect.NewRequest(&podiumv1.SubmitRequest{Spec: &podiumv1.TaskSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	var a *podiumv1.Assign
	for a == nil {
		m, err := node.stream.Receive()
		if err != nil {
			t.Fatalf("waiting for the assignment: %v", err)
		}
		a = m.GetAssign()
	}
	if a.TaskId != sub.Msg.Task.Id {
		t.Fatalf("assigned %s, want %s", a.TaskId, sub.Msg.Task.Id)
	}
	// The replica answers every batch with an ack; drain them so its send
	// queue never fills.
	go func() {
		for {
			if _, err := node.stream.Receive(); err != nil {
				return
			}
		}
	}()
	beat()
	node.send(t, status(a.TaskId, a.Attempt, 1, podiumv1.TaskState_TASK_STATE_RUNNING, nil))

	nodeStatus := func() podiumv1.NodeStatus {
		res, err := r.Admin().ListNodes(ctx, connect.NewRequest(&podiumv1.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.Nodes[0].Status
	}
	coordtest.Eventually(t, 10*time.Second, "the node to be online", func() bool {
		return nodeStatus() == podiumv1.NodeStatus_NODE_STATUS_ONLINE
	})
	// Output only, a chunk every 100 ms, for three offline thresholds: at
	// least 30 chunks however slow the machine.
	var off uint64
	seq := uint64(2)
	var notOnline []string
	start := time.Now()
	for chunks := 0; chunks < 30 || time.Since(start) < 3*offline; chunks++ {
		line := fmt.Sprintf("line %d\n", chunks)
		node.send(t, logEv(a.TaskId, a.Attempt, seq, off, podiumv1.LogStream_LOG_STREAM_STDOUT, line))
		seq, off = seq+1, off+uint64(len(line))
		if s := nodeStatus(); s != podiumv1.NodeStatus_NODE_STATUS_ONLINE && len(notOnline) < 10 {
			notOnline = append(notOnline, fmt.Sprintf("+%s %s", time.Since(start).Round(100*time.Millisecond), s))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the test ran out of time sending output: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(notOnline) > 0 {
		t.Fatalf("a node delivering output with no heartbeat for %s (unreachable after %s) left online: %v",
			time.Since(start).Round(100*time.Millisecond), unreachable, notOnline)
	}
	// Silence: output proves the node is there, and its absence must still
	// be noticed.
	coordtest.Eventually(t, 10*time.Second, "the silent node to become unreachable", func() bool {
		return nodeStatus() != podiumv1.NodeStatus_NODE_STATUS_ONLINE
	})
}
