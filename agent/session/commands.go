package session

// What the coordinator tells the node to do with tasks: the adopt list of a
// HelloAck, assignments, messages for a task's inbox, cancels.

import (
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/attempt"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// applyHelloAck settles which attempts this node keeps, then takes the
// coordinator's settings. reported is what the Hello listed.
func (s *Session) applyHelloAck(ack *podiumv1.HelloAck, reported []*podiumv1.RunningTask) {
	answered := make(map[attempt.Key]bool)
	for _, a := range ack.GetAdopt() {
		key := attempt.Of(a)
		answered[key] = true
		if a.GetKeep() {
			if !s.out.adopt(key, a.GetAckedSeq()) {
				s.log.Debug("the coordinator adopted a task this node no longer tracks", "task_id", key.TaskID, "attempt", key.Attempt)
			}
			// The secrets' values again, so that a resumed attempt's
			// output is redacted before it is let through.
			s.cfg.Runner.Adopted(key.TaskID, key.Attempt, a.GetSecrets())
			continue
		}
		s.log.Warn("cancelling a task the coordinator no longer holds on this node",
			"task_id", key.TaskID, "attempt", key.Attempt, "reason", CancelReasonNotHeld)
		live := s.cfg.Runner.Cancel(key.TaskID, key.Attempt, CancelReasonNotHeld, 0)
		s.out.forget(key, live)
	}
	for _, r := range reported {
		key := attempt.Of(r)
		if !answered[key] {
			// Keep it and re-send what was not acknowledged: dropping output
			// because an answer was missing would be the worse mistake.
			s.log.Debug("the coordinator did not answer for a reported task; keeping it", "task_id", key.TaskID, "attempt", key.Attempt)
		}
	}
	s.applySettings(ack)
}

// handleAssign starts an assigned task, or sends it back when the node has no
// room. A repeated assignment of an attempt the node already has is ignored:
// running a task twice is worse than anything a lost message can cause.
func (s *Session) handleAssign(a *podiumv1.Assign) {
	key := attempt.Of(a)
	log := s.log.With("assign", attempt.RedactAssign(a))
	if s.out.ended(key) {
		log.Warn("ignoring a repeated assignment of a task attempt that already ran on this node")
		return
	}
	if s.out.active(key) {
		// Checked before the slots: a full node must not answer a repeat
		// with a rejection, which would requeue a task that is running.
		log.Warn("ignoring a repeated assignment of a running task attempt")
		return
	}
	if s.freeSlots() < 1 {
		s.mu.Lock()
		draining := s.draining
		s.mu.Unlock()
		log.Info("rejecting assignment: no free slot", "draining", draining, "running", s.cfg.Runner.Running(), "max_tasks", s.maxTasks())
		s.giveBack(key, RejectReasonNoSlot)
		return
	}
	if s.cfg.Refuse != nil {
		if why := s.cfg.Refuse(a); why != "" {
			log.Info("rejecting assignment", "reason", why)
			s.giveBack(key, why)
			return
		}
	}
	if !s.out.begin(a) {
		log.Warn("ignoring a repeated assignment of a running task attempt")
		return
	}
	done, err := s.cfg.Runner.Start(s.taskCtx, a, s.Emit)
	if err != nil {
		if errors.Is(err, attempt.ErrAlreadyRunning) {
			log.Warn("ignoring a repeated assignment of a running task attempt")
			return
		}
		log.Error("could not start assigned task", "err", err)
		return
	}
	s.track(a)
	s.Track(done)
}

// giveBack sends an assignment the node cannot take back to the coordinator
// with why: a QUEUED status, which requeues the task.
func (s *Session) giveBack(key attempt.Key, why string) {
	s.Emit(&podiumv1.TaskEvent{
		TaskId:  key.TaskID,
		Attempt: key.Attempt,
		Time:    timestamppb.Now(),
		Body: &podiumv1.TaskEvent_Status{Status: &podiumv1.StatusChange{
			State:  podiumv1.TaskState_TASK_STATE_QUEUED,
			Reason: why,
		}},
	}, nil)
}

// handleInject queues a person's message for a running task's inbox. It
// does not wait for the delivery (see deliveries): the receive loop must go
// on whatever the task has done to its inbox.
func (s *Session) handleInject(in *podiumv1.Inject) { s.inject.enqueue(in) }

func (s *Session) handleCancel(c *podiumv1.Cancel) {
	grace := taskspec.Seconds(c.GetGraceSeconds())
	if s.cfg.Runner.Cancel(c.GetTaskId(), c.GetAttempt(), c.GetReason(), grace) {
		s.log.Info("cancelling task", "task_id", c.GetTaskId(), "attempt", c.GetAttempt(), "reason", c.GetReason(), "grace", grace)
		return
	}
	// Nothing runs: the task already ended (its terminal status is on its
	// way) or never reached this node. Either way there is nothing to stop.
	s.log.Info("cancel for a task that is not running here; nothing to do", "task_id", c.GetTaskId(), "attempt", c.GetAttempt())
}
