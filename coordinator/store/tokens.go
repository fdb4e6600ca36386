package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Where a node's label came from (NodeLabel.Source).
const (
	// LabelFromToken: the enrollment token's labels.
	LabelFromToken = "token"
	// LabelFromNode: asked for at enrollment (`podium-agent enroll
	// --label`) under a token that allowed it.
	LabelFromNode = "node"
	// LabelFromAdmin: added by an admin (`podium node label`).
	LabelFromAdmin = "admin"
	// LabelFromUnknown: a label the node had before sources were recorded
	// (migration 0035) that its enrollment token did not give.
	LabelFromUnknown = "unknown"
)

// CreateToken stores the hash of a new enrollment token. allowNodeLabels
// lets the node it enrolls add labels of its own; without it the node
// carries exactly labels. The call's audit row commits with it.
func (s *Store) CreateToken(ctx context.Context, hash []byte, labels []string, allowNodeLabels bool, expiresAt time.Time) error {
	if labels == nil {
		labels = []string{}
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			"insert into podium.enrollment_tokens (token_hash, labels, allow_node_labels, expires_at) values ($1, $2, $3, $4)",
			hash, labels, allowNodeLabels, expiresAt)
		return err
	})
}

// NewNode is what enrollment writes.
type NewNode struct {
	ID           string
	KeyHash      []byte
	Hostname     string
	AgentVersion string
	// Labels are those the node asks for. They must be among the token's
	// unless the token allows node labels (LabelsNotGrantedError).
	Labels []string
	// DeviceID and Device bind the node to the Tailscale device it enrolled
	// from; empty over the local transport.
	DeviceID string
	Device   string
}

// LabelsNotGrantedError refuses an enrollment that asked for labels its
// token does not give. Nothing is written: the token stays unused, so the
// node can enroll with it again without them (the holder learns nothing
// they could not by asking for no labels at all).
type LabelsNotGrantedError struct {
	// Labels are those asked for and not granted.
	Labels []string
	// Rekey is true for a rekey token, under which a node keeps the labels
	// it has and gains none.
	Rekey bool
	// NodeID is the node a rekey token re-enrolls.
	NodeID string
}

func (e *LabelsNotGrantedError) Error() string {
	quoted := make([]string, len(e.Labels))
	for i, l := range e.Labels {
		quoted[i] = fmt.Sprintf("%q", l)
	}
	what := strings.Join(quoted, ", ")
	if e.Rekey {
		return fmt.Sprintf("the labels %s are not node %s's: a rekeyed node keeps the labels it has and gains none at enrollment; "+
			"enroll without --label, and have an admin add them with `podium node label %s --add LABEL` if the node should carry them",
			what, e.NodeID, e.NodeID)
	}
	return fmt.Sprintf("this enrollment token does not grant the labels %s, and a node does not choose its own labels "+
		"(they decide which tasks, and which secrets, reach it); the token was not used. Enroll without --label, "+
		"or ask an admin for a token that grants them (`podium token create --label LABEL`) or lets the node choose "+
		"(`podium token create --allow-node-labels`), or to add them after enrollment (`podium node label NODE --add LABEL`)", what)
}

// EnrollNode spends a token and creates the node in one transaction. The token
// is claimed with a conditional UPDATE, so of two enrolls racing on one token
// exactly one sees a row come back. It returns the node's labels: the
// token's, and the node's own when the token allows them. A node that asks
// for labels the token does not give is refused (LabelsNotGrantedError) and
// the token is left unused.
func (s *Store) EnrollNode(ctx context.Context, tokenHash []byte, n NewNode) ([]string, error) {
	var labels []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var tokenLabels []string
		var allowNode bool
		err := tx.QueryRow(ctx, `update podium.enrollment_tokens
			set used_at = now(), used_by_node = $2
			where token_hash = $1 and used_at is null and expires_at > now()
			returning labels, allow_node_labels`, tokenHash, n.ID).Scan(&tokenLabels, &allowNode)
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
		extra := missing(n.Labels, tokenLabels)
		if len(extra) > 0 && !allowNode {
			// Returning the error rolls the claim of the token back.
			return &LabelsNotGrantedError{Labels: extra}
		}
		labels = unionLabels(tokenLabels, n.Labels)
		sources := map[string]labelSource{}
		for _, l := range labels {
			sources[l] = labelSource{Source: LabelFromNode}
		}
		for _, l := range tokenLabels {
			sources[l] = labelSource{Source: LabelFromToken}
		}
		_, err = tx.Exec(ctx, `insert into podium.nodes (id, key_hash, hostname, agent_version, labels, label_sources,
				tailscale_device_id, tailscale_device)
			values ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8)`,
			n.ID, n.KeyHash, n.Hostname, n.AgentVersion, labels, sources, n.DeviceID, n.Device)
		return err
	})
	return labels, err
}

// missing is what of want is not in have, each once, in want's order.
func missing(want, have []string) []string {
	var out []string
	for _, l := range want {
		if !slices.Contains(have, l) && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
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
