package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HealthChange is a node whose status the watchdog changed.
type HealthChange struct {
	NodeID string
	From   string
	To     string
}

// SweepHealth decides node health from the stored heartbeat clock alone: a node
// silent for unreachable is unreachable, for offline is offline. The clock
// counts from clockStart at the earliest — when this leader took over — so
// after a leader change or a restart of every replica the nodes get the whole
// period to reconnect before anything is declared.
func (s *Store) SweepHealth(ctx context.Context, unreachable, offline time.Duration, clockStart time.Time) ([]HealthChange, error) {
	rows, err := s.pool.Query(ctx, `with h as (
			select id, status as old,
				case when greatest(last_heartbeat_at, $3) < now() - make_interval(secs => $2) then 'offline'
				     when greatest(last_heartbeat_at, $3) < now() - make_interval(secs => $1) then 'unreachable'
				     else status end as new
			from podium.nodes where last_heartbeat_at is not null and status <> 'offline')
		update podium.nodes n set status = h.new from h
		where n.id = h.id and h.new <> h.old and h.new in ('unreachable', 'offline')
		returning n.id, h.old, h.new`, unreachable.Seconds(), offline.Seconds(), clockStart)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[HealthChange])
}

// LoseTasksOfOfflineNodes applies the node-loss policy to every task still held
// by an offline node. It is idempotent, so a sweep that died half way is
// finished by the next one. It returns the tasks it changed.
func (s *Store) LoseTasksOfOfflineNodes(ctx context.Context) ([]string, error) {
	var changed []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		changed = nil
		rows, err := tx.Query(ctx, "select "+taskColumns+` from podium.tasks
			where state in ('scheduled', 'provisioning', 'running')
			  and node_id in (select id from podium.nodes where status = 'offline')
			order by id for update skip locked`)
		if err != nil {
			return err
		}
		ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
		if err != nil {
			return err
		}
		for _, t := range ts {
			if _, err := loseTask(ctx, tx, t, fmt.Sprintf("node %s went offline (no heartbeat)", *t.NodeID)); err != nil {
				return err
			}
			changed = append(changed, t.ID)
		}
		return nil
	})
	return changed, err
}
