package nodes

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
)

// authenticate checks a node id and key against the hash enrollment stored
// (enroll.Hash), in constant time, and the tailnet device the key comes from
// (checkDevice). Every stream's Hello and every upload is authenticated.
func (s *Service) authenticate(ctx context.Context, nodeID, key string) (store.Node, error) {
	n, err := s.store.GetNode(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return n, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("node %q is not enrolled (or was removed): enroll it again with `podium-agent enroll`", nodeID))
	}
	if err != nil {
		return n, lockTableFull(err)
	}
	if subtle.ConstantTimeCompare(n.KeyHash, enroll.Hash(key)) != 1 {
		return n, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("the node key for %s was refused: the agent's identity file does not match; enroll again with `podium-agent enroll`", nodeID))
	}
	if err := s.checkDevice(ctx, nodeID); err != nil {
		return n, err
	}
	return n, nil
}

// checkDevice refuses a node key presented from a tailnet device other than
// the one the node is bound to. A key is a file on disk; a copy of it (a
// cloned VM, a stolen backup) would otherwise be the node. A node that has no
// device yet (enrolled over the local transport) is bound to the first device
// it connects from. Callers of the local transport have no device and are not
// checked: there the key is all there is.
func (s *Service) checkDevice(ctx context.Context, nodeID string) error {
	caller, _ := tailnet.CallerFrom(ctx)
	if !caller.OnTailnet() {
		return nil
	}
	bound, err := s.store.BindDevice(ctx, nodeID, store.Device{ID: caller.DeviceID, Name: caller.Device})
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("read the node's device: %w", err))
	}
	if bound.ID == caller.DeviceID {
		return nil
	}
	s.log.Warn("node key presented from another device; refused", "node", nodeID,
		"bound_device", bound.Name, "bound_device_id", bound.ID, "device", caller.Device, "device_id", caller.DeviceID)
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"node %s is bound to the Tailscale device %s (%s), and this is %s (%s): a node's key works only from its own device. "+
			"If the node has moved to this machine, run `podium node rekey %s` and enroll here with the token it prints "+
			"(`podium-agent enroll --token T --force`)",
		nodeID, bound.Name, bound.ID, caller.Device, caller.DeviceID, nodeID))
}
