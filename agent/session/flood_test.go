package session_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A task that prints without end keeps the outbox refilled as fast as acks
// empty it; the node's heartbeats must still go out, or the coordinator takes
// the node for offline while it is busiest. The coordinator here acks every
// batch at once; the task prints until the test has seen enough heartbeats.
func TestHeartbeatsGoOutWhileATaskFloodsOutput(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := startWith(t, r, session.Config{MaxTasks: 1, MaxPendingBytes: 4 << 20}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck()) // heartbeats every 100 ms
	cn.push(assign("t1"))
	cn.events(t, 1) // PROVISIONING: the task runs
	var stop atomic.Bool
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		r.status(key("t1"), podiumv1.TaskState_TASK_STATE_RUNNING, "")
		chunk := strings.Repeat("y\n", 16<<10)
		for off := uint64(0); !stop.Load(); off += uint64(len(chunk)) {
			r.log(key("t1"), off, chunk)
		}
		r.status(key("t1"), podiumv1.TaskState_TASK_STATE_SUCCEEDED, "")
	}()
	heartbeats, events := 0, 0
	for heartbeats < 10 {
		m := cn.read(t)
		if b := m.GetEvents(); b != nil {
			evs := b.GetEvents()
			events += len(evs)
			cn.push(ack("t1", evs[len(evs)-1].GetSeq()))
		}
		if m.GetHeartbeat() != nil && events > 0 {
			heartbeats++
		}
	}
	stop.Store(true)
	for {
		m := cn.read(t)
		if b := m.GetEvents(); b != nil {
			evs := b.GetEvents()
			cn.push(ack("t1", evs[len(evs)-1].GetSeq()))
			if evs[len(evs)-1].GetStatus().GetState() == podiumv1.TaskState_TASK_STATE_SUCCEEDED {
				break
			}
		}
	}
	<-printed
	t.Logf("%d events alongside %d heartbeats", events, heartbeats)
}
