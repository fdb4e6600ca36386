// Package tailnet decides who is calling the coordinator when it serves on a
// Tailscale tailnet, and what each kind of caller may do.
//
// On the tailnet there is no API token: the WireGuard tunnel already says
// which device a connection comes from, and Tailscale's WhoIs says what that
// device is. A device carrying the node tag is a node; an untagged device
// with a user login is a person; any other tagged device (a CI runner, a
// database host, another service) is refused, because nobody decided it may
// use Podium. The decision is made on every request, from the connection's
// source address, so a retag or a removed device takes effect at once and a
// long-lived client cannot keep rights it has lost.
//
// The decision rests on the device's tags, never on its user profile: on
// Tailscale a tagged device's "user" is a placeholder (tagged-devices), and a
// person who tags their own machine has handed its identity to the tag.
//
// This package holds only the decision and the types the rest of the
// coordinator reads; joining the tailnet (tsnet or the host's tailscaled) is
// in the join subpackage, so the domain packages that ask "who is calling?"
// do not link a network stack.
package tailnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"tailscale.com/client/tailscale/apitype"
)

// DefaultNodeTag is the ACL tag that makes a device a Podium node.
const DefaultNodeTag = "tag:podium-node"

// Kind is what a caller is.
type Kind string

const (
	// KindPerson is an untagged tailnet device with a user login.
	KindPerson Kind = "person"
	// KindNode is a tailnet device with the node tag.
	KindNode Kind = "node"
	// KindToken is a local-transport caller that presented the bootstrap API
	// token (PODIUM_TOKEN): the coordinator's own admin.
	KindToken Kind = "token"
	// KindUser is a local-transport caller that presented a personal API
	// token; Login is the user's name.
	KindUser Kind = "user"
)

// CapName is the Tailscale app capability Podium reads a person's role from:
// a grant in the tailnet policy such as
//
//	"grants": [{"src": ["group:ops"], "dst": ["tag:podium"],
//	            "app": {"podium.dev/cap/podium": [{"role": "admin"}]}}]
//
// arrives in WhoIs's capability map; the highest role named wins.
const CapName = "podium.dev/cap/podium"

// capValue is one value of CapName.
type capValue struct {
	Role string `json:"role"`
}

// Caller is who the coordinator decided is calling.
type Caller struct {
	Kind Kind
	// Login is a person's Tailscale login name, e.g. alice@example.com. It is
	// what their tasks record as requested_by. Empty for nodes.
	Login string
	// Device is the calling device's Tailscale name (its MagicDNS name
	// without the trailing dot); DeviceID its stable device ID, which
	// survives renames and address changes and so is what a node is bound
	// to. Both are empty for token callers.
	Device   string
	DeviceID string
	Tags     []string
	// Granted are the roles the tailnet policy grants the person under
	// CapName, as written there (coordinator/access validates them).
	Granted []string
	// Role is what the caller may do (admin, member, viewer), decided by
	// coordinator/access; RoleFrom says where it came from.
	Role, RoleFrom string
}

// OnTailnet reports whether the caller was identified by Tailscale (and so
// has a device a node can be bound to).
func (c Caller) OnTailnet() bool { return c.DeviceID != "" }

// Name is how logs and requested_by name the caller: a person's login, a
// node's device, or "token".
func (c Caller) Name() string {
	switch {
	case c.Login != "":
		return c.Login
	case c.Device != "":
		return c.Device
	}
	return string(c.Kind)
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller the server put in ctx, if any.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// ErrNotPeer means WhoIs did not know the source address: the connection did
// not come through the tailnet (or the peer left it).
var ErrNotPeer = errors.New("tailnet: the caller is not a device of this tailnet")

// ErrForeignTag means a tagged device without the node tag called.
var ErrForeignTag = errors.New("tailnet: the calling device is tagged, but not as a Podium node")

// ErrNoLogin means an untagged device came without a user login.
var ErrNoLogin = errors.New("tailnet: the calling device has neither the node tag nor a user login")

// Classify decides what a WhoIs answer is. nodeTag is the tag that makes a
// device a node (DefaultNodeTag unless the operator chose another).
func Classify(who *apitype.WhoIsResponse, nodeTag string) (Caller, error) {
	if who == nil || who.Node == nil {
		return Caller{}, ErrNotPeer
	}
	n := who.Node
	c := Caller{
		Device:   strings.TrimSuffix(n.Name, "."),
		DeviceID: string(n.StableID),
		Tags:     append([]string(nil), n.Tags...),
	}
	if c.Device == "" && n.Hostinfo.Valid() {
		c.Device = n.Hostinfo.Hostname()
	}
	if n.IsTagged() {
		for _, t := range n.Tags {
			if t == nodeTag {
				c.Kind = KindNode
				return c, nil
			}
		}
		return c, fmt.Errorf("%w: device %s has the tags %s; Podium admits devices tagged %s (nodes) and untagged devices of signed-in people",
			ErrForeignTag, c.Device, strings.Join(n.Tags, ", "), nodeTag)
	}
	if who.UserProfile == nil || who.UserProfile.LoginName == "" {
		return c, fmt.Errorf("%w: device %s; tag it %s if it is a node, or sign in to Tailscale on it as a person", ErrNoLogin, c.Device, nodeTag)
	}
	c.Kind = KindPerson
	c.Login = who.UserProfile.LoginName
	for _, raw := range who.CapMap[CapName] {
		var v capValue
		if json.Unmarshal([]byte(raw), &v) == nil && v.Role != "" {
			c.Granted = append(c.Granted, v.Role)
		}
	}
	return c, nil
}
