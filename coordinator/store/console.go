package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsoleSession is a row of podium.console_sessions (0029): a person signed
// in to the web console on the local transport. The session id itself is
// never stored, only its SHA-256 (IDHash).
type ConsoleSession struct {
	IDHash []byte
	// Kind is "token" (the bootstrap token) or "user" (a personal token).
	Kind string
	// Name is the user's name; empty for the bootstrap token.
	Name string
	// TokenHash is the SHA-256 of the token that was presented, which the
	// console checks again on every request.
	TokenHash []byte
	RoleFrom  string
	// CSRF is the secret the session's forms carry.
	CSRF      []byte
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CreateConsoleSession stores a session and deletes the expired ones, so the
// table holds no more than the sessions started within one expiry period.
func (s *Store) CreateConsoleSession(ctx context.Context, cs ConsoleSession) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `delete from podium.console_sessions where expires_at < now()`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into podium.console_sessions (id_hash, kind, name, token_hash, role_from, csrf, expires_at)
			values ($1, $2, $3, $4, $5, $6, $7)`, cs.IDHash, cs.Kind, cs.Name, cs.TokenHash, cs.RoleFrom, cs.CSRF, cs.ExpiresAt)
		return err
	})
}

// ConsoleSessionByHash reads the unexpired session whose id hashes to
// idHash; ErrNotFound when there is none (never was, signed out, expired).
func (s *Store) ConsoleSessionByHash(ctx context.Context, idHash []byte) (ConsoleSession, error) {
	var cs ConsoleSession
	err := s.pool.QueryRow(ctx, `select id_hash, kind, name, token_hash, role_from, csrf, created_at, expires_at
		from podium.console_sessions where id_hash = $1 and expires_at > now()`, idHash).
		Scan(&cs.IDHash, &cs.Kind, &cs.Name, &cs.TokenHash, &cs.RoleFrom, &cs.CSRF, &cs.CreatedAt, &cs.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return cs, ErrNotFound
	}
	return cs, err
}

// DeleteConsoleSession ends a session (signing out); a session already gone
// is not an error.
func (s *Store) DeleteConsoleSession(ctx context.Context, idHash []byte) error {
	_, err := s.pool.Exec(ctx, `delete from podium.console_sessions where id_hash = $1`, idHash)
	return err
}

// NodeHealthRow is one row of the podium.node_health view, with the node's
// slot count beside it.
type NodeHealthRow struct {
	Node     string
	Hostname string
	Status   string
	// SecondsSinceHeartbeat is nil for a node that never sent one.
	SecondsSinceHeartbeat *int64
	// SessionReplica is the replica holding the node's stream, if any.
	SessionReplica *string
	Slots          int32
	FreeSlots      int32
	RunningTasks   int32
	Draining       bool
	Labels         []string
	GPUs           int32
	FreeGPUs       int32
}

// NodeHealth reads podium.node_health, at most limit nodes, oldest
// enrollment first; with node set, only that node.
func (s *Store) NodeHealth(ctx context.Context, node string, limit int) ([]NodeHealthRow, error) {
	rows, err := s.pool.Query(ctx, `select h.node, h.hostname, h.status, h.seconds_since_heartbeat, h.session_replica,
			(case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end)::int,
			h.free_slots::int, h.running_tasks::int, h.draining, h.labels, h.gpus::int, h.free_gpus::int
		from podium.node_health h join podium.nodes n on n.id = h.node
		where $1 = '' or h.node = $1
		order by n.enrolled_at, n.id limit $2`, node, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeHealthRow, error) {
		var h NodeHealthRow
		err := r.Scan(&h.Node, &h.Hostname, &h.Status, &h.SecondsSinceHeartbeat, &h.SessionReplica,
			&h.Slots, &h.FreeSlots, &h.RunningTasks, &h.Draining, &h.Labels, &h.GPUs, &h.FreeGPUs)
		return h, err
	})
}

// QueueReason is how many queued tasks wait for one reason.
type QueueReason struct {
	Reason string
	Count  int64
	// Oldest is when the longest-waiting of them was submitted.
	Oldest time.Time
}

// QueueReasons groups the queued tasks by why they wait (the reason the
// scheduler last wrote), most common first, at most limit reasons.
func (s *Store) QueueReasons(ctx context.Context, limit int) ([]QueueReason, error) {
	rows, err := s.pool.Query(ctx, `select reason, count(*), min(created_at) from podium.tasks
		where state = 'queued' group by reason order by count(*) desc, reason limit $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueReason, error) {
		var q QueueReason
		return q, r.Scan(&q.Reason, &q.Count, &q.Oldest)
	})
}
