package nodes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Secret prefixes make a leaked secret recognisable for what it is.
const (
	TokenPrefix = "podium_et_"
	KeyPrefix   = "podium_nk_"
)

// NewSecret returns 32 random bytes, printable, with a prefix, and its hash.
func NewSecret(prefix string) (secret string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("nodes: crypto/rand failed: " + err.Error())
	}
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Hash(secret)
}

// Hash is what is stored of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Enroll exchanges a single-use enrollment token for a node identity. The node
// key is returned exactly once; only its SHA-256 reaches Postgres.
func (s *Service) Enroll(ctx context.Context, req *connect.Request[podiumv1.EnrollRequest]) (*connect.Response[podiumv1.EnrollResponse], error) {
	peer := req.Peer().Addr
	if !s.enrollLimit.allowed(peer) {
		s.log.Warn("enrollment refused: too many failed attempts", "peer", peer)
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("too many failed enrollment attempts from %s; wait a minute and check the token", host(peer)))
	}
	token := strings.TrimSpace(req.Msg.GetToken())
	if token == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("token: required: pass the enrollment token from `podium token create`"))
	}
	for _, l := range req.Msg.GetLabels() {
		if err := validLabel(l); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	nodeID := ids.New("node")
	key, keyHash := NewSecret(KeyPrefix)
	labels, err := s.store.EnrollNode(ctx, Hash(token), store.NewNode{
		ID: nodeID, KeyHash: keyHash, Hostname: req.Msg.GetHostname(),
		AgentVersion: req.Msg.GetAgentVersion(), Labels: req.Msg.GetLabels(),
	})
	switch {
	case errors.Is(err, store.ErrTokenUnknown), errors.Is(err, store.ErrTokenUsed), errors.Is(err, store.ErrTokenExpired):
		s.enrollLimit.failed(peer)
		s.log.Warn("enrollment refused", "peer", peer, "why", err)
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("enroll: %w", err))
	}
	s.log.Info("node enrolled", "node", nodeID, "hostname", req.Msg.GetHostname(), "labels", labels)
	return connect.NewResponse(&podiumv1.EnrollResponse{NodeId: nodeID, NodeKey: key, Labels: labels}), nil
}

// authenticate checks a node id and key against the stored hash in constant time.
func (s *Service) authenticate(ctx context.Context, nodeID, key string) (store.Node, error) {
	n, err := s.store.GetNode(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return n, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("node %q is not enrolled (or was removed): enroll it again with `podium-agent enroll`", nodeID))
	}
	if err != nil {
		return n, connect.NewError(connect.CodeUnavailable, err)
	}
	if subtle.ConstantTimeCompare(n.KeyHash, Hash(key)) != 1 {
		return n, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("the node key for %s was refused: the agent's identity file does not match; enroll again with `podium-agent enroll`", nodeID))
	}
	return n, nil
}

func validLabel(l string) error {
	if l == "" || len(l) > 128 {
		return fmt.Errorf("label %q: want 1 to 128 characters of A-Z a-z 0-9 . _ - / =", l)
	}
	for _, r := range l {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("._-/=", r):
		default:
			return fmt.Errorf("label %q: character %q is not allowed; use A-Z a-z 0-9 . _ - / =", l, r)
		}
	}
	return nil
}
