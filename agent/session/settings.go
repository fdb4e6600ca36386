package session

// The node-wide settings the coordinator sets (drain, slot override, labels,
// heartbeat interval) and what the node advertises under them: free slots,
// capacity, heartbeats, and whether it is drained.

import (
	"context"
	"slices"
	"time"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// applySettings takes the node-wide settings of a HelloAck.
func (s *Session) applySettings(ack *podiumv1.HelloAck) {
	s.applyConfig(ack.GetDraining(), ack.GetMaxTasksOverride(), ack.GetLabels())
	s.mu.Lock()
	if ms := ack.GetHeartbeatIntervalMs(); ms > 0 {
		s.interval = time.Duration(ms) * time.Millisecond
	}
	s.mu.Unlock()
	s.setReplicas(ack.GetReplicas())
	s.setThresholds(ack)
	select {
	case s.settingsC <- struct{}{}:
	default:
	}
}

func (s *Session) heartbeatInterval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interval
}

// applyConfig takes the coordinator's drain flag, slot override and labels,
// from a HelloAck or a live NodeConfig, and makes the writer heartbeat at once
// so the scheduler sees the new free slots without waiting for the next tick.
func (s *Session) applyConfig(draining bool, override int32, labels []string) {
	s.mu.Lock()
	if s.draining != draining || s.override != override || !slices.Equal(s.labels, labels) {
		s.log.Info("coordinator changed this node's settings", "draining", draining,
			"max_tasks_override", override, "labels", labels)
	}
	s.draining = draining
	s.override = override
	s.labels = append(s.labels[:0], labels...)
	s.mu.Unlock()
	select {
	case s.settingsC <- struct{}{}:
	default:
	}
}

// drained is ExitOnDrain's condition: draining, nothing running, nothing
// unacknowledged.
func (s *Session) drained() bool {
	if !s.cfg.ExitOnDrain {
		return false
	}
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	return draining && s.cfg.Runner.Running() == 0 && s.out.empty()
}

// maxTasks is the node's budget: the coordinator's override when it set one.
func (s *Session) maxTasks() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.override > 0 {
		return s.override
	}
	return int32(s.cfg.MaxTasks)
}

// freeSlots is how many more tasks the node takes. The node enforces its own
// budget, so this is both what it advertises and what it checks assignments
// against: 0 while draining or while the data disk is nearly full.
func (s *Session) freeSlots() int32 {
	s.mu.Lock()
	draining := s.draining
	diskLow := s.cfg.MinFreeDiskMB > 0 && s.lastCap != nil &&
		(s.lastCap.GetDiskFreeMb() > 0 && s.lastCap.GetDiskFreeMb() < s.cfg.MinFreeDiskMB || s.lastCap.GetDiskLowSince() != nil)
	s.mu.Unlock()
	if draining || diskLow {
		return 0
	}
	return max(0, s.maxTasks()-int32(s.cfg.Runner.Running()))
}

func (s *Session) capacity(ctx context.Context) *podiumv1.Capacity {
	c := s.cfg.Capacity(ctx)
	if c == nil {
		c = &podiumv1.Capacity{}
	}
	c.MaxTasks = s.maxTasks()
	s.mu.Lock()
	s.lastCap = c
	s.mu.Unlock()
	return c
}

func (s *Session) heartbeat(ctx context.Context) *podiumv1.Heartbeat {
	c := s.capacity(ctx)
	return &podiumv1.Heartbeat{
		Capacity:     c,
		RunningTasks: int32(s.cfg.Runner.Running()),
		FreeSlots:    s.freeSlots(),
	}
}

// HeartbeatNow makes the writer send a heartbeat, with the capacity measured
// afresh, without waiting for the next tick: the agent calls it after a
// rediscovery of its GPUs (SIGHUP), so the scheduler sees them at once.
func (s *Session) HeartbeatNow() {
	select {
	case s.settingsC <- struct{}{}:
	default:
	}
}
