package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Device is the Tailscale device a node is bound to. ID is empty for a node
// that enrolled over the local transport.
type Device struct {
	ID   string
	Name string
}

// NodeDevice reads the device a node is bound to.
func (s *Store) NodeDevice(ctx context.Context, nodeID string) (Device, error) {
	var d Device
	err := s.pool.QueryRow(ctx, `select coalesce(tailscale_device_id, ''), tailscale_device
		from podium.nodes where id = $1`, nodeID).Scan(&d.ID, &d.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	return d, err
}

// NodeDevices reads every node's device binding, by node id; unbound nodes
// are left out.
func (s *Store) NodeDevices(ctx context.Context) (map[string]Device, error) {
	rows, err := s.pool.Query(ctx, `select id, tailscale_device_id, tailscale_device
		from podium.nodes where tailscale_device_id is not null`)
	if err != nil {
		return nil, err
	}
	out := map[string]Device{}
	var id string
	var d Device
	_, err = pgx.ForEachRow(rows, []any{&id, &d.ID, &d.Name}, func() error {
		out[id] = d
		return nil
	})
	return out, err
}

// BindDevice returns the device the node is bound to, first binding it to d
// if it has none (it enrolled over the local transport before the coordinator
// moved to the tailnet). Of two streams racing to bind, the first wins and
// the second sees its binding. A node that is bound already costs one read,
// no write.
func (s *Store) BindDevice(ctx context.Context, nodeID string, d Device) (Device, error) {
	cur, err := s.NodeDevice(ctx, nodeID)
	if err != nil || cur.ID != "" {
		return cur, err
	}
	_, err = s.pool.Exec(ctx, `update podium.nodes set tailscale_device_id = $2, tailscale_device = $3
		where id = $1 and tailscale_device_id is null`, nodeID, d.ID, d.Name)
	if err != nil {
		return cur, err
	}
	return s.NodeDevice(ctx, nodeID)
}

// CreateRekeyToken stores the hash of a token that re-enrolls nodeID.
func (s *Store) CreateRekeyToken(ctx context.Context, hash []byte, nodeID string, expiresAt time.Time) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `insert into podium.enrollment_tokens (token_hash, labels, expires_at, rekey_node)
			select $1, '{}', $2, id from podium.nodes where id = $3`, hash, expiresAt, nodeID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// Enrolled is what spending an enrollment token produced.
type Enrolled struct {
	NodeID string
	Labels []string
	// Rekeyed is true when the token was a rekey token: NodeID is the
	// existing node, which now has the new key and device.
	Rekeyed bool
}

// Enroll spends a token of either kind. An ordinary token creates the node n
// describes; a rekey token gives its node n's key, device, hostname and
// agent version, keeps everything else (its labels and their sources
// included), and asks whichever replica holds the node's stream (on the old
// key) to end it. Under either, labels the token does not give are refused
// (LabelsNotGrantedError) and the token stays unused.
func (s *Store) Enroll(ctx context.Context, tokenHash []byte, n NewNode) (Enrolled, error) {
	var rekey *string
	err := s.pool.QueryRow(ctx, "select rekey_node from podium.enrollment_tokens where token_hash = $1", tokenHash).Scan(&rekey)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Enrolled{}, err
	}
	if rekey == nil {
		// Unknown tokens go this way too, for EnrollNode's answer.
		labels, err := s.EnrollNode(ctx, tokenHash, n)
		return Enrolled{NodeID: n.ID, Labels: labels}, err
	}
	out := Enrolled{NodeID: *rekey, Rekeyed: true}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update podium.enrollment_tokens set used_at = now(), used_by_node = rekey_node
			where token_hash = $1 and used_at is null and expires_at > now()`, tokenHash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var used bool
			if err := tx.QueryRow(ctx, "select used_at is not null from podium.enrollment_tokens where token_hash = $1",
				tokenHash).Scan(&used); errors.Is(err, pgx.ErrNoRows) {
				return ErrTokenUnknown // the node, and its token with it, was removed meanwhile
			} else if err != nil {
				return err
			}
			if used {
				return ErrTokenUsed
			}
			return ErrTokenExpired
		}
		// A rekeyed node keeps its labels and gains none: the rekey token
		// names a node, not labels, and the node does not choose its own.
		// Asking for labels it has already is harmless (the same command
		// line that enrolled it). The refusal rolls the token's use back.
		var have []string
		err = tx.QueryRow(ctx, "select labels from podium.nodes where id = $1 for update", out.NodeID).Scan(&have)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTokenUnknown
		}
		if err != nil {
			return err
		}
		if extra := missing(n.Labels, have); len(extra) > 0 {
			return &LabelsNotGrantedError{Labels: extra, Rekey: true, NodeID: out.NodeID}
		}
		err = tx.QueryRow(ctx, `update podium.nodes set key_hash = $2,
				tailscale_device_id = nullif($3, ''), tailscale_device = $4,
				hostname = $5, agent_version = $6, takeover_requested_at = clock_timestamp()
			where id = $1 returning labels`, out.NodeID, n.KeyHash, n.DeviceID, n.Device, n.Hostname, n.AgentVersion).Scan(&out.Labels)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTokenUnknown
		}
		return err
	})
	return out, err
}
