package session

// Messages for tasks' inboxes, delivered off the receive loop.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

const (
	// DefaultInjectTimeout bounds one delivery into a task's inbox. A
	// delivery is a few file operations on the node's own disk; one that
	// takes this long is stuck (a disk that stopped answering, or something
	// the task found that the inbox does not yet guard against).
	DefaultInjectTimeout = 10 * time.Second
	// injectQueue is how many messages wait for delivery at most. A message
	// is at most 64 KiB, so the queue holds at most 4 MiB.
	injectQueue = 64
	// maxStuckInjects is how many deliveries past their timeout may still
	// be running before further messages are refused at once: a call that
	// does not return cannot be stopped, only left behind, and leaving one
	// behind per message would grow without bound.
	maxStuckInjects = 4
)

// deliveries puts messages into tasks' inboxes, one at a time, in the order
// the coordinator sent them. It exists so that the receive loop, which also
// carries acknowledgements, cancels and assignments, never waits on a task's
// inbox: the inbox is a directory the task writes, and whatever the task
// does to it must not be able to stop the node from taking its next command.
type deliveries struct {
	s       *Session
	q       chan *podiumv1.Inject
	timeout time.Duration

	mu    sync.Mutex
	stuck int // calls past their timeout that have not returned
}

func newDeliveries(s *Session, timeout time.Duration) *deliveries {
	if timeout <= 0 {
		timeout = DefaultInjectTimeout
	}
	return &deliveries{s: s, q: make(chan *podiumv1.Inject, injectQueue), timeout: timeout}
}

// enqueue hands a message to the delivery goroutine without waiting. A full
// queue drops the message with an error in the log: the coordinator has
// marked it delivered, so it is lost, but the receive loop goes on.
func (d *deliveries) enqueue(in *podiumv1.Inject) {
	select {
	case d.q <- in:
	default:
		d.s.log.Error("dropped a message for a task's inbox: messages are waiting for delivery faster than they are delivered",
			"task_id", in.GetTaskId(), "attempt", in.GetAttempt(), "message_id", in.GetMessageId(), "queued", injectQueue)
	}
}

// run delivers queued messages until ctx ends. It is the session's, started
// and waited for by Run.
func (d *deliveries) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-d.q:
			d.deliver(ctx, in)
		}
	}
}

// injectResult is what one Inject call returned.
type injectResult struct {
	ok  bool
	err error
}

// deliver makes one Inject call and waits for it at most the timeout. A call
// that takes longer is logged as failed and left to finish on its own.
func (d *deliveries) deliver(ctx context.Context, in *podiumv1.Inject) {
	log := d.s.log.With("task_id", in.GetTaskId(), "attempt", in.GetAttempt(), "message_id", in.GetMessageId())
	d.mu.Lock()
	stuck := d.stuck
	d.mu.Unlock()
	if stuck >= maxStuckInjects {
		log.Error("could not deliver a message to a task's inbox: earlier deliveries are stuck and have not returned; "+
			"message dropped (check the agent's data disk)", "stuck", stuck)
		return
	}
	done := make(chan injectResult, 1)
	go func() {
		ok, err := d.s.cfg.Runner.Inject(in.GetTaskId(), in.GetAttempt(), in.GetMessageId(), in.GetText())
		done <- injectResult{ok, err}
	}()
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	select {
	case r := <-done:
		report(log, r)
	case <-t.C:
		log.Error("could not deliver a message to a task's inbox within the time allowed; "+
			"the message is dropped and the node goes on", "timeout", d.timeout)
		d.leaveBehind(log, done)
	case <-ctx.Done():
		// The session is ending; the call finishes on its own, and the
		// executor logs what became of the message.
	}
}

// leaveBehind counts a call that did not return in time until it does, and
// then says how it ended.
func (d *deliveries) leaveBehind(log *slog.Logger, done <-chan injectResult) {
	d.mu.Lock()
	d.stuck++
	d.mu.Unlock()
	go func() {
		r := <-done
		d.mu.Lock()
		d.stuck--
		d.mu.Unlock()
		log.Warn("a message delivery that was given up on has returned", "delivered", r.ok && r.err == nil, "err", r.err)
	}()
}

// report logs how a delivery went. A message for a task that is not here is
// dropped with a log line: the coordinator only sends messages for tasks it
// holds on this node, so the task has just ended.
func report(log *slog.Logger, r injectResult) {
	switch {
	case errors.Is(r.err, attempt.ErrNotRunning):
		log.Info("message for a task that is not running here; dropped")
	case r.err != nil:
		log.Error("could not deliver a message to a task's inbox", "err", r.err)
	case !r.ok:
		log.Debug("dropped a repeated message")
	}
}
