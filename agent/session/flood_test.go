package session_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podiumhq/podium/agent/session"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/wait"
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

// Output that waits while the node has no stream goes out in messages of up
// to a MiB when the stream is back, not the 32 KiB that makes a batch worth
// sending at once: the coordinator stores a node's messages one commit each,
// so message size is what bounds how fast a backlog (or a flood) is stored.
func TestBacklogGoesOutInLargeMessages(t *testing.T) {
	t.Parallel()
	r := newRunner()
	f := startWith(t, r, session.Config{MaxTasks: 1, MaxPendingBytes: 16 << 20}, nil)
	cn := f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck())
	cn.push(assign("t1"))
	cn.events(t, 1) // PROVISIONING
	cn.push(ack("t1", 1))
	wait.For(t, patience, "the node to take the ack of PROVISIONING", func() bool { return f.sess.Stats().EventsSpooled == 0 })
	cn.end <- errors.New("restart")

	const chunks, size = 32, 64 << 10 // 2 MiB while there is no stream
	chunk := strings.Repeat("z", size)
	for i := range chunks {
		r.log(key("t1"), uint64(i*size), chunk)
	}
	cn = f.coord.next(t)
	cn.hello(t)
	cn.push(helloAck(&podiumv1.Adopt{TaskId: "t1", Attempt: 1, Keep: true, AckedSeq: 1}))
	got, largest := 0, 0
	deadline := time.Now().Add(patience)
	for got < chunks {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d chunks arrived within %s", got, chunks, patience)
		}
		b := cn.read(t).GetEvents()
		if b == nil {
			continue
		}
		bytes := 0
		for _, ev := range b.GetEvents() {
			if ev.GetLog() != nil {
				got++
				bytes += len(ev.GetLog().GetData())
			}
		}
		largest = max(largest, bytes)
	}
	if largest < 1<<20 {
		t.Fatalf("the 2 MiB backlog went out in messages of at most %d bytes, want one of 1 MiB", largest)
	}
	if largest > 1<<20+size {
		t.Fatalf("a message carried %d bytes of output, more than the 1 MiB a batch holds and one chunk", largest)
	}
}
