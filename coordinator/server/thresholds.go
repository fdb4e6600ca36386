package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/podiumhq/podium/coordinator/store"
)

// Thresholds are the node-health and deadline thresholds every replica must
// agree on: they are kept in Postgres (podium.settings), and the leader reads
// them from there on every sweep. A zero field is one not given; New fills it
// from the database, or from DefaultThresholds when nothing is stored yet.
//
// Which wins when replicas disagree: the database, written by the last replica
// that started with the value given explicitly (a flag or its environment
// variable). A replica given a value that replaces a different stored one
// logs a warning naming the replica that set it; a replica given none uses
// what is stored.
type Thresholds struct {
	// UnreachableAfter: a node without a heartbeat this long is unreachable
	// (--unreachable-after).
	UnreachableAfter time.Duration
	// OfflineAfter: a node without a heartbeat this long is offline, and its
	// tasks go through the node-loss policy (--offline-after).
	OfflineAfter time.Duration
	// AckDeadline: an assignment not accepted within it is revoked and
	// requeued (--ack-deadline).
	AckDeadline time.Duration
	// WriteOffAfter: a cancelled task whose node is gone is written off after
	// it (--write-off-after).
	WriteOffAfter time.Duration
}

// DefaultThresholds are the thresholds when nothing else says: 30 s, 120 s,
// 15 s and 60 s.
func DefaultThresholds() Thresholds {
	return Thresholds{UnreachableAfter: 30 * time.Second, OfflineAfter: 120 * time.Second,
		AckDeadline: 15 * time.Second, WriteOffAfter: 60 * time.Second}
}

// DefaultHeartbeatInterval is what nodes are told to heartbeat at unless
// --heartbeat-interval says otherwise.
const DefaultHeartbeatInterval = 10 * time.Second

// Or is t with its zero fields taken from d.
func (t Thresholds) Or(d Thresholds) Thresholds { return fromStore(t.store().Or(d.store())) }

// Check says whether t is a workable set of thresholds for nodes that
// heartbeat every heartbeat: offline after more than unreachable, unreachable
// after more than one heartbeat interval, and positive deadlines. Each error
// says which value to change.
func (t Thresholds) Check(heartbeat time.Duration) error {
	switch {
	case heartbeat <= 0:
		return fmt.Errorf("--heartbeat-interval %s: want a positive duration such as 10s", heartbeat)
	case t.UnreachableAfter <= 0 || t.OfflineAfter <= 0 || t.AckDeadline <= 0 || t.WriteOffAfter <= 0:
		return fmt.Errorf("--unreachable-after %s, --offline-after %s, --ack-deadline %s and --write-off-after %s must all be positive durations",
			t.UnreachableAfter, t.OfflineAfter, t.AckDeadline, t.WriteOffAfter)
	case t.UnreachableAfter <= heartbeat:
		return fmt.Errorf("--unreachable-after %s is not longer than --heartbeat-interval %s: every node would go unreachable between two heartbeats; "+
			"raise --unreachable-after (to at least %s, three heartbeats) or lower --heartbeat-interval", t.UnreachableAfter, heartbeat, 3*heartbeat)
	case t.OfflineAfter <= t.UnreachableAfter:
		return fmt.Errorf("--offline-after %s is not longer than --unreachable-after %s: a node must be unreachable before it is offline; "+
			"raise --offline-after or lower --unreachable-after", t.OfflineAfter, t.UnreachableAfter)
	}
	return nil
}

func (t Thresholds) store() store.Thresholds {
	return store.Thresholds{UnreachableAfter: t.UnreachableAfter, OfflineAfter: t.OfflineAfter,
		AckDeadline: t.AckDeadline, WriteOffAfter: t.WriteOffAfter}
}

func fromStore(t store.Thresholds) Thresholds {
	return Thresholds{UnreachableAfter: t.UnreachableAfter, OfflineAfter: t.OfflineAfter,
		AckDeadline: t.AckDeadline, WriteOffAfter: t.WriteOffAfter}
}

// settleThresholds stores the replica's explicit thresholds, reads the rest,
// checks the result against this replica's heartbeat interval, and says in
// the log what it did when replicas disagree.
func settleThresholds(ctx context.Context, st *store.Store, replica string, given Thresholds, heartbeat time.Duration, log *slog.Logger) (Thresholds, error) {
	before, after, err := st.SettleThresholds(ctx, replica, given.store(), DefaultThresholds().store(), func(stored store.StoredThresholds, t store.Thresholds) error {
		if err := fromStore(t).Check(heartbeat); err != nil {
			if given.Or(DefaultThresholds()) == fromStore(t) {
				return err
			}
			return fmt.Errorf("the thresholds stored in Postgres (podium.settings, set by replica %s) with this replica's do not fit: %w; "+
				"give this replica the value to change explicitly (flag or PODIUM_* variable), which replaces the stored one for every replica",
				stored.SetBy, err)
		}
		return nil
	})
	if err != nil {
		return Thresholds{}, fmt.Errorf("thresholds: %w", err)
	}
	got := fromStore(after.Thresholds)
	if before.Thresholds != after.Thresholds && before.SetBy != replica {
		log.Warn("thresholds: this replica's flags replace the stored ones for every replica",
			"was", fromStore(before.Thresholds), "set_by", before.SetBy, "now", got)
	} else if given.Or(got) != given.Or(DefaultThresholds()) {
		log.Info("thresholds: using the values stored in Postgres", "thresholds", got, "set_by", after.SetBy)
	}
	return got, nil
}

// LogValue makes a Thresholds one readable log attribute.
func (t Thresholds) LogValue() slog.Value {
	return slog.GroupValue(slog.Duration("unreachable_after", t.UnreachableAfter), slog.Duration("offline_after", t.OfflineAfter),
		slog.Duration("ack_deadline", t.AckDeadline), slog.Duration("write_off_after", t.WriteOffAfter))
}
