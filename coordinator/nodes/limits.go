package nodes

import (
	"fmt"
	"math"

	"github.com/podiumhq/podium/coordinator/enroll"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// What a node may send on its stream; what it says about itself in its Hello
// is bounded as at enrollment (coordinator/enroll). A node's key makes it a
// node, not a trusted program: a broken or hostile agent must not be able to
// store a megabyte of one log chunk, or hand a replica a million events to
// write in one transaction. Each bound is far above what the agent sends
// (chunks of at most 32 KiB, batches of at most 256 events), so only a node
// that is not behaving meets one. A node that breaks one is disconnected
// with InvalidArgument and a reason, which the agent logs when its stream
// ends, and the replica logs it too, naming the node.
const (
	// maxIDBytes bounds the ids and key a node names itself and its tasks
	// with, as at enrollment.
	maxIDBytes = enroll.MaxIDBytes
	// MaxRunningInHello bounds the tasks a Hello may report: each costs the
	// replica a query while it reconciles.
	MaxRunningInHello = 1000
	// MaxEventsPerMessage bounds the events of one EventBatch.
	MaxEventsPerMessage = 1000
	// MaxLogChunkBytes bounds the data of one log chunk, and the text of a
	// note or a status's reason.
	MaxLogChunkBytes = 64 << 10
)

// boundsErr refuses what a node sent past a bound (enroll.ErrNodeBounds).
var boundsErr = enroll.BoundsErr

// checkHello bounds the first message of a stream.
func checkHello(h *podiumv1.Hello) error {
	if err := enroll.CheckNodeInfo(h.GetHostname(), h.GetAgentVersion()); err != nil {
		return err
	}
	if len(h.GetNodeId()) > maxIDBytes || len(h.GetNodeKey()) > maxIDBytes {
		return boundsErr("node_id and node_key: more than %d bytes", maxIDBytes)
	}
	if n := len(h.GetRunning()); n > MaxRunningInHello {
		return boundsErr("running: %d tasks, more than %d", n, MaxRunningInHello)
	}
	// Stopping slots are busy slots: a node claiming more than it could
	// report running would hold the scheduler off itself for nothing.
	if n := h.GetStopping(); n < 0 || n > MaxRunningInHello {
		return boundsErr("stopping: %d slots, want 0 to %d", n, MaxRunningInHello)
	}
	for i, r := range h.GetRunning() {
		if len(r.GetTaskId()) > maxIDBytes {
			return boundsErr("running[%d].task_id: more than %d bytes", i, maxIDBytes)
		}
	}
	return nil
}

// checkEvents bounds one message of events, before any of it is stored: a
// message is taken whole or not at all.
func checkEvents(events []*podiumv1.TaskEvent) error {
	if n := len(events); n > MaxEventsPerMessage {
		return boundsErr("%d events in one message, more than %d", n, MaxEventsPerMessage)
	}
	for i, ev := range events {
		where := func() string { return fmt.Sprintf("events[%d] (seq %d)", i, ev.GetSeq()) }
		if len(ev.GetTaskId()) > maxIDBytes {
			return boundsErr("%s: a task_id of more than %d bytes", where(), maxIDBytes)
		}
		if ev.GetSeq() > math.MaxInt64 {
			return boundsErr("%s: a seq past 2^63", where())
		}
		switch b := ev.GetBody().(type) {
		case *podiumv1.TaskEvent_Log:
			n := len(b.Log.GetData())
			if n > MaxLogChunkBytes {
				return boundsErr("%s: a log chunk of %d bytes, more than %d", where(), n, MaxLogChunkBytes)
			}
			if b.Log.GetOffset() > uint64(math.MaxInt64-n) {
				return boundsErr("%s: a log chunk at offset %d runs past 2^63", where(), b.Log.GetOffset())
			}
		case *podiumv1.TaskEvent_Note:
			if n := len(b.Note.GetText()); n > MaxLogChunkBytes {
				return boundsErr("%s: a note of %d bytes, more than %d", where(), n, MaxLogChunkBytes)
			}
		case *podiumv1.TaskEvent_Status:
			if n := len(b.Status.GetReason()); n > MaxLogChunkBytes {
				return boundsErr("%s: a status reason of %d bytes, more than %d", where(), n, MaxLogChunkBytes)
			}
		}
	}
	return nil
}
