// Package enroll turns enrollment tokens into node credentials: it serves
// podium.v1.NodeService's Enroll (coordinator/server joins it to the stream
// and uploads of coordinator/nodes in one handler), makes the secrets a
// token and a node key are, and keeps the hash of each, which is all that
// reaches Postgres. It also holds what decides whether an agent may be a
// node at all, asked again at each stream's Hello by coordinator/nodes: the
// agent version policy and the bounds on what a node says about itself.
// Admin's `podium token create` makes its tokens with NewSecret.
package enroll

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/internal/ids"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Secret prefixes make a leaked secret recognisable for what it is.
const (
	TokenPrefix = "podium_et_"
	KeyPrefix   = "podium_nk_"
)

// auditTimeout bounds the writing of a refused enrollment's audit row,
// which goes on after the caller has gone.
const auditTimeout = 3 * time.Second

// Config tunes enrollment. Zero values take the defaults.
type Config struct {
	// Failures is how many failed enrollments one address may make in a
	// burst (20); one more is allowed every Refill (30 s).
	Failures int
	Refill   time.Duration
}

func (c *Config) defaults() {
	if c.Failures == 0 {
		c.Failures = 20
	}
	if c.Refill == 0 {
		c.Refill = 30 * time.Second
	}
}

// Deps are what enrollment works with.
type Deps struct {
	Store *store.Store
	Log   *slog.Logger
}

// Service serves Enroll, podium.v1.NodeService's exchange of a token for a
// node identity.
type Service struct {
	store *store.Store
	log   *slog.Logger
	limit *enrollLimiter
}

// New returns the enrollment service.
func New(cfg Config, deps Deps) *Service {
	cfg.defaults()
	return &Service{store: deps.Store, log: deps.Log, limit: newEnrollLimiter(cfg.Refill, cfg.Failures)}
}

// NewSecret returns 32 random bytes, printable, with a prefix, and its hash.
func NewSecret(prefix string) (secret string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("enroll: crypto/rand failed: " + err.Error())
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
	if !s.limit.allowed(peer) {
		s.log.Warn("enrollment refused: too many failed attempts", "peer", peer)
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("too many failed enrollment attempts from %s; wait a minute and check the token", host(peer)))
	}
	if err := checkEnroll(req.Msg); err != nil {
		s.log.Warn("enrollment refused", "peer", peer, "why", err)
		return nil, err
	}
	if err := CheckAgentVersion(req.Msg.GetAgentVersion()); err != nil {
		s.log.Warn("enrollment refused", "peer", peer, "why", err)
		return nil, err
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
	key, keyHash := NewSecret(KeyPrefix)
	// On the tailnet the node is bound to the device it enrolls from, so its
	// key is worth nothing anywhere else (see coordinator/nodes' authenticate).
	caller, _ := tailnet.CallerFrom(ctx)
	audit := enrollAudit(caller, peer, req.Msg)
	out, err := s.store.Enroll(store.WithAudit(ctx, audit), Hash(token), store.NewNode{
		ID: ids.New("node"), KeyHash: keyHash, Hostname: req.Msg.GetHostname(),
		AgentVersion: req.Msg.GetAgentVersion(), Labels: req.Msg.GetLabels(),
		DeviceID: caller.DeviceID, Device: caller.Device,
	})
	var notGranted *store.LabelsNotGrantedError
	switch {
	case errors.Is(err, store.ErrTokenUnknown), errors.Is(err, store.ErrTokenUsed), errors.Is(err, store.ErrTokenExpired):
		s.limit.failed(peer)
		s.log.Warn("enrollment refused", "peer", peer, "device", caller.Device, "why", err)
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	case errors.As(err, &notGranted):
		// A node asking for labels is how it would get itself sent work
		// (and secrets) meant for trusted nodes: refused, said at warning
		// level and audited, and counted against the peer like a bad token.
		s.limit.failed(peer)
		s.log.Warn("enrollment refused: the node asked for labels its token does not grant", "peer", peer,
			"device", caller.Device, "hostname", req.Msg.GetHostname(), "labels", notGranted.Labels, "rekey_node", notGranted.NodeID)
		code := connect.CodePermissionDenied
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		werr := s.store.WriteAudit(actx, audit, code.String())
		cancel()
		if werr != nil {
			s.log.Error("audit row not written", "action", audit.Action, "who", audit.Who, "target", audit.Target, "err", werr)
		}
		return nil, connect.NewError(code, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("enroll: %w", err))
	}
	if caller.OnTailnet() && caller.Kind != tailnet.KindNode {
		// Only reachable with --allow-untagged-nodes. Said every time, at
		// warning level, because the node now runs tasks with the rights of
		// the person whose device it is.
		s.log.Warn("node enrolled from an UNTAGGED device (allowed by --allow-untagged-nodes): it runs tasks with its owner's tailnet rights; tag the device and rekey the node",
			"node", out.NodeID, "device", caller.Device, "device_id", caller.DeviceID, "owner", caller.Login)
	}
	if out.Rekeyed {
		// The old key is gone: a stream still open on it is asked to end.
		_ = s.store.Notify(ctx, store.ChannelTakeover, out.NodeID)
		s.log.Info("node rekeyed", "node", out.NodeID, "hostname", req.Msg.GetHostname(), "device", caller.Device,
			"device_id", caller.DeviceID)
	} else {
		s.log.Info("node enrolled", "node", out.NodeID, "hostname", req.Msg.GetHostname(), "labels", out.Labels,
			"device", caller.Device, "device_id", caller.DeviceID)
	}
	return connect.NewResponse(&podiumv1.EnrollResponse{NodeId: out.NodeID, NodeKey: key, Labels: out.Labels}), nil
}

// enrollAudit is the audit row of an enrollment: who enrolled (the tailnet
// device, or the peer's address over the local transport), the hostname and
// the labels the node asked for. It is written with the node, or on its own
// when the labels are refused; an enrollment with a token that is unknown,
// used or expired is only logged, since anyone who reaches the coordinator
// could fill the audit log with those.
func enrollAudit(caller tailnet.Caller, peer string, m *podiumv1.EnrollRequest) *store.Audit {
	a := &store.Audit{Action: "NodeService.Enroll", Role: "node", Transport: "local",
		Who: "node enrolling from " + host(peer)}
	if caller.OnTailnet() {
		a.Who, a.Transport = caller.Name(), "tailnet"
	}
	a.Target = m.GetHostname()
	if len(m.GetLabels()) > 0 {
		a.Target += " asking for labels " + strings.Join(m.GetLabels(), ",")
	}
	// Bounded like every audit target: hostname and labels are bounded
	// (checkEnroll), but together they could be long.
	if len(a.Target) > 512 {
		a.Target = strings.ToValidUTF8(a.Target[:512], "") + "…"
	}
	return a
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
