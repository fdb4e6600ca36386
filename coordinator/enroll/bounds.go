package enroll

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// What a node may say about itself, in Enroll and in every stream's Hello. A
// node's key makes it a node, not a trusted program: each bound is far
// above what the agent sends, so only a node that is not behaving meets
// one, and it is refused with InvalidArgument and a reason. The bounds on
// the rest of what a node sends on its stream are coordinator/nodes'.
const (
	// MaxHostnameBytes bounds the hostname a node gives in Enroll and
	// Hello: a DNS name is at most 253 bytes, a Linux hostname 64.
	MaxHostnameBytes = 255
	// MaxAgentVersionBytes bounds the agent version it gives.
	MaxAgentVersionBytes = 255
	// MaxIDBytes bounds the ids and key a node names itself and its tasks
	// with; real ones are a few dozen bytes.
	MaxIDBytes = 255
)

// ErrNodeBounds is the cause of every refusal of what a node sent past the
// protocol's bounds, here and in coordinator/nodes.
var ErrNodeBounds = errors.New("the node sent more than the protocol allows")

// BoundsErr is the refusal of what a node sent past a bound: InvalidArgument,
// wrapping ErrNodeBounds, saying which bound.
func BoundsErr(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: %s", ErrNodeBounds, fmt.Sprintf(format, args...)))
}

// CheckNodeInfo bounds what a node says about itself in Enroll and Hello.
func CheckNodeInfo(hostname, agentVersion string) error {
	if n := len(hostname); n > MaxHostnameBytes {
		return BoundsErr("hostname: %d bytes, more than %d", n, MaxHostnameBytes)
	}
	if n := len(agentVersion); n > MaxAgentVersionBytes {
		return BoundsErr("agent_version: %d bytes, more than %d", n, MaxAgentVersionBytes)
	}
	return nil
}

// checkEnroll bounds an enrollment request.
func checkEnroll(req *podiumv1.EnrollRequest) error {
	if err := CheckNodeInfo(req.GetHostname(), req.GetAgentVersion()); err != nil {
		return err
	}
	if n := len(req.GetToken()); n > MaxIDBytes {
		return BoundsErr("token: %d bytes, more than %d: pass the token `podium token create` printed", n, MaxIDBytes)
	}
	if n := len(req.GetLabels()); n > taskspec.MaxLabels {
		return BoundsErr("labels: %d, more than %d", n, taskspec.MaxLabels)
	}
	return nil
}
