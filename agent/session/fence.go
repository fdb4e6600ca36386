package session

// Fencing: a node cut off from every coordinator replica for as long as the
// control plane takes to declare it offline stops the attempts the control
// plane will have requeued elsewhere, so that no task ever runs twice at
// once, and keeps the others running for adoption when it is back.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/agent/attempt"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// fenceCheck is how often the silence is measured against the threshold.
const fenceCheck = 100 * time.Millisecond

// requeuable says whether the control plane requeues an attempt when its
// node goes offline: the same rule as its node-loss policy (retry_on_node_loss
// and an attempt left), so both sides agree on which tasks would run twice.
func requeuable(a *podiumv1.Assign) bool {
	return a.GetSpec().GetRetryOnNodeLoss() && a.GetAttempt() < max(a.GetSpec().GetMaxAttempts(), 1)
}

// track remembers an attempt this node runs, and whether fencing stops it,
// and hands a fenceable one's runner its lease at once.
func (s *Session) track(a *podiumv1.Assign) {
	s.fmu.Lock()
	s.runs[attempt.Of(a)] = requeuable(a)
	s.fmu.Unlock()
	s.renewLeases()
}

// leaseStep is how far the fence must have moved before a lease is
// rewritten: a lease a little behind only fences a cut-off node that much
// sooner, and a node with many tasks and a busy stream does not rewrite
// every lease on every answer.
const leaseStep = 500 * time.Millisecond

// renewLeases tells the runner of each attempt fencing would stop when to
// stop it if this node has not by then: just after the node's own fence
// point (the offline threshold less the lead, counted from the last answer
// of a replica). An agent that stops acting — a hung process, a
// machine too loaded to schedule it — stops renewing, and the runner, PID 1
// of the task's container, fences the attempt itself at that moment, so that
// it never runs beside the attempt the control plane starts elsewhere.
// Nothing is leased before a coordinator has said its thresholds, nor in a
// silence already acted on.
func (s *Session) renewLeases() {
	lead := s.fenceLead()
	s.fmu.Lock()
	offline, last := s.offlineAfter, s.lastReached
	if offline <= 0 || last.IsZero() || !s.fencedAt.IsZero() {
		s.fmu.Unlock()
		return
	}
	// A quarter of the lead after this node's own fence point, with a
	// quarter of it as grace: an agent that can act always fences first
	// (and says why in the task's log), and a hung one's runner still has
	// the attempt stopped by offline less half the lead, as the agent's
	// own fence (grace: half the lead) would.
	at := last.Add(offline - lead + lead/4)
	var due []attempt.Key
	for key, fenceable := range s.runs {
		if fenceable && at.Sub(s.leased[key]) >= leaseStep {
			s.leased[key] = at
			due = append(due, key)
		}
	}
	s.fmu.Unlock()
	grace := max(lead/4, time.Millisecond)
	for _, key := range due {
		s.cfg.Runner.Lease(key.TaskID, key.Attempt, at, grace)
	}
}

// reached records that a replica answered: any message on a stream is proof
// the control plane still hears this node (every heartbeat is answered).
func (s *Session) reached() {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.lastReached = time.Now()
	s.fencedAt = time.Time{}
}

// setThresholds takes the control plane's thresholds from a HelloAck. A
// coordinator that sends none (an older one) leaves fencing off.
func (s *Session) setThresholds(ack *podiumv1.HelloAck) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if ms := ack.GetOfflineAfterMs(); ms > 0 {
		s.offlineAfter = time.Duration(ms) * time.Millisecond
		s.unreachableAfter = time.Duration(ack.GetUnreachableAfterMs()) * time.Millisecond
	}
}

// fenceLead is how long before the offline threshold the node fences: the
// control plane counts its clock from the last heartbeat it received, which
// is at or before the answer the node last got, so fencing a heartbeat
// interval early (at most halfway from unreachable to offline) stops the
// attempt before the control plane can have requeued it, with the answer's
// travel and the stop's grace (half the lead) to spare.
func (s *Session) fenceLead() time.Duration {
	s.fmu.Lock()
	offline, unreachable := s.offlineAfter, s.unreachableAfter
	s.fmu.Unlock()
	lead := s.heartbeatInterval()
	if unreachable > 0 && unreachable < offline {
		lead = min(lead, (offline-unreachable)/2)
	}
	return min(lead, offline/4)
}

// runFencing checks the silence, and renews the runners' leases, until ctx
// ends.
func (s *Session) runFencing(ctx context.Context) {
	t := time.NewTicker(fenceCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.fenceIfCutOff()
			s.renewLeases()
		}
	}
}

// fenceIfCutOff fences once per silence that reaches the threshold.
func (s *Session) fenceIfCutOff() {
	lead := s.fenceLead()
	s.fmu.Lock()
	for key := range s.runs {
		if s.out.ended(key) {
			delete(s.runs, key) // it ran to its end: nothing to fence
		}
	}
	for key := range s.leased {
		if _, ok := s.runs[key]; !ok {
			delete(s.leased, key)
		}
	}
	offline, last := s.offlineAfter, s.lastReached
	due := offline > 0 && !last.IsZero() && s.fencedAt.IsZero() && time.Since(last) >= offline-lead
	if due {
		s.fencedAt = time.Now()
	}
	runs := make(map[attempt.Key]bool, len(s.runs))
	for k, v := range s.runs {
		runs[k] = v
	}
	s.fmu.Unlock()
	if !due {
		return
	}
	silence := time.Since(last).Round(time.Millisecond)
	s.log.Warn("no coordinator replica reached for as long as the control plane takes to declare this node offline; "+
		"fencing: stopping the tasks it will requeue elsewhere, keeping the others for adoption",
		"silence", silence, "offline_after", offline)
	for key, requeue := range runs {
		if !requeue {
			note := fmt.Sprintf("this node reached no coordinator replica for %s (the control plane's offline threshold is %s); "+
				"the attempt keeps running so the control plane can adopt it when the node is back "+
				"(without retry_on_node_loss, or on its last attempt, it is not run elsewhere)", silence, offline)
			s.emitNote(key, note)
			s.log.Warn("fencing: keeping a task running for adoption", "task_id", key.TaskID, "attempt", key.Attempt)
			continue
		}
		reason := fmt.Sprintf("fenced: this node reached no coordinator replica for %s, close to the control plane's "+
			"offline threshold (%s); the task has retry_on_node_loss, so the control plane requeues it elsewhere, "+
			"and this attempt is stopped so that it never runs twice at once", silence, offline)
		s.out.fence(key) // first: its note must not go out on this stream
		s.emitNote(key, reason)
		s.fmu.Lock()
		delete(s.runs, key)
		s.fmu.Unlock()
		s.log.Warn("fencing: stopping a task the control plane will requeue", "task_id", key.TaskID, "attempt", key.Attempt)
		s.cfg.Runner.Cancel(key.TaskID, key.Attempt, reason, max(lead/2, time.Millisecond))
		select {
		case s.restream <- struct{}{}:
		default:
		}
	}
}

// fenceEnded fences, before its end is queued, an attempt its runner fenced
// (runnerFenced: the agent's lease ran out while it hung or was stopped, as
// a restarted agent learns from the runner log) or a fenceable one that ends
// while this node has been silent past its fence point: the end then goes
// out only after a Hello that left the attempt out, so the control plane
// applies its node-loss policy (it runs the task again) instead of taking
// the end for the task's own.
func (s *Session) fenceEnded(key attempt.Key, runnerFenced bool) {
	lead := s.fenceLead()
	s.fmu.Lock()
	offline, last := s.offlineAfter, s.lastReached
	due := runnerFenced || s.runs[key] && offline > 0 && !last.IsZero() && time.Since(last) >= offline-lead
	s.fmu.Unlock()
	if !due {
		return
	}
	s.log.Warn("fencing: a task the control plane will requeue ended while this node reached no coordinator replica; "+
		"its end waits for a new stream", "task_id", key.TaskID, "attempt", key.Attempt)
	s.out.fence(key)
	select {
	case s.restream <- struct{}{}:
	default:
	}
}

// emitNote adds a note of the session's own to an attempt's log.
func (s *Session) emitNote(key attempt.Key, text string) {
	s.Emit(&podiumv1.TaskEvent{TaskId: key.TaskID, Attempt: key.Attempt, Time: timestamppb.Now(),
		Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{Text: text}}}, nil)
}
