package nodes

import (
	"errors"
	"fmt"
	"math"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// What a node may send. A node's key makes it a node, not a trusted program:
// a broken or hostile agent must not be able to store a megabyte of one log
// chunk, or hand a replica a million events to write in one transaction. Each
// bound is far above what the agent sends (chunks of at most 32 KiB, batches
// of at most 256 events), so only a node that is not behaving meets one. A
// node that breaks one is refused (Enroll) or disconnected (Stream) with
// InvalidArgument and a reason, which the agent logs when its stream ends,
// and the replica logs it too, naming the node.
const (
	// MaxHostnameBytes bounds the hostname a node gives in Enroll and
	// Hello: a DNS name is at most 253 bytes, a Linux hostname 64.
	MaxHostnameBytes = 255
	// MaxAgentVersionBytes bounds the agent version it gives.
	MaxAgentVersionBytes = 255
	// maxIDBytes bounds the ids and key a node names itself and its tasks
	// with; real ones are a few dozen bytes.
	maxIDBytes = 255
	// MaxRunningInHello bounds the tasks a Hello may report: each costs the
	// replica a query while it reconciles.
	MaxRunningInHello = 1000
	// MaxEventsPerMessage bounds the events of one EventBatch.
	MaxEventsPerMessage = 1000
	// MaxLogChunkBytes bounds the data of one log chunk, and the text of a
	// note or a status's reason.
	MaxLogChunkBytes = 64 << 10
)

// ErrNodeBounds is the cause of every refusal of what a node sent past the
// bounds above.
var ErrNodeBounds = errors.New("the node sent more than the protocol allows")

func boundsErr(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: %s", ErrNodeBounds, fmt.Sprintf(format, args...)))
}

// checkNodeInfo bounds what a node says about itself in Enroll and Hello.
func checkNodeInfo(hostname, agentVersion string) error {
	if n := len(hostname); n > MaxHostnameBytes {
		return boundsErr("hostname: %d bytes, more than %d", n, MaxHostnameBytes)
	}
	if n := len(agentVersion); n > MaxAgentVersionBytes {
		return boundsErr("agent_version: %d bytes, more than %d", n, MaxAgentVersionBytes)
	}
	return nil
}

// checkEnroll bounds an enrollment request.
func checkEnroll(req *podiumv1.EnrollRequest) error {
	if err := checkNodeInfo(req.GetHostname(), req.GetAgentVersion()); err != nil {
		return err
	}
	if n := len(req.GetToken()); n > maxIDBytes {
		return boundsErr("token: %d bytes, more than %d: pass the token `podium token create` printed", n, maxIDBytes)
	}
	if n := len(req.GetLabels()); n > taskspec.MaxLabels {
		return boundsErr("labels: %d, more than %d", n, taskspec.MaxLabels)
	}
	return nil
}

// checkHello bounds the first message of a stream.
func checkHello(h *podiumv1.Hello) error {
	if err := checkNodeInfo(h.GetHostname(), h.GetAgentVersion()); err != nil {
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
