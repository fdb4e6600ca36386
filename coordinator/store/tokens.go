package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateToken stores the hash of a new enrollment token.
func (s *Store) CreateToken(ctx context.Context, hash []byte, labels []string, expiresAt time.Time) error {
	if labels == nil {
		labels = []string{}
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			"insert into podium.enrollment_tokens (token_hash, labels, expires_at) values ($1, $2, $3)",
			hash, labels, expiresAt)
		return err
	})
}

// NewNode is what enrollment writes.
type NewNode struct {
	ID           string
	KeyHash      []byte
	Hostname     string
	AgentVersion string
	Labels       []string // the node's own; the token's are added
	// DeviceID and Device bind the node to the Tailscale device it enrolled
	// from; empty over the local transport.
	DeviceID string
	Device   string
}

// EnrollNode spends a token and creates the node in one transaction. The token
// is claimed with a conditional UPDATE, so of two enrolls racing on one token
// exactly one sees a row come back. It returns the node's labels: the union of
// the token's and the node's.
func (s *Store) EnrollNode(ctx context.Context, tokenHash []byte, n NewNode) ([]string, error) {
	var labels []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var tokenLabels []string
		err := tx.QueryRow(ctx, `update podium.enrollment_tokens
			set used_at = now(), used_by_node = $2
			where token_hash = $1 and used_at is null and expires_at > now()
			returning labels`, tokenHash, n.ID).Scan(&tokenLabels)
		if errors.Is(err, pgx.ErrNoRows) {
			var used, expired bool
			err := tx.QueryRow(ctx, `select used_at is not null, expires_at <= now()
				from podium.enrollment_tokens where token_hash = $1`, tokenHash).Scan(&used, &expired)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return ErrTokenUnknown
			case err != nil:
				return err
			case used:
				return ErrTokenUsed
			default:
				return ErrTokenExpired
			}
		}
		if err != nil {
			return err
		}
		labels = unionLabels(tokenLabels, n.Labels)
		_, err = tx.Exec(ctx, `insert into podium.nodes (id, key_hash, hostname, agent_version, labels,
				tailscale_device_id, tailscale_device)
			values ($1, $2, $3, $4, $5, nullif($6, ''), $7)`, n.ID, n.KeyHash, n.Hostname, n.AgentVersion, labels, n.DeviceID, n.Device)
		return err
	})
	return labels, err
}

func unionLabels(a, b []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, l := range append(append([]string{}, a...), b...) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}
