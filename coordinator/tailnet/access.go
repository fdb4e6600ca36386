package tailnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"tailscale.com/client/tailscale/apitype"
)

// WhoIser names the tailnet device behind a connection's source address.
// The join package adapts tailscale's local client to it (for tsnet's
// embedded node and for the host's tailscaled alike). An address no device
// has is an error wrapping ErrNotPeer.
type WhoIser interface {
	WhoIs(ctx context.Context, remoteAddr string) (*apitype.WhoIsResponse, error)
}

// whoIsTimeout bounds one WhoIs. It is a local call (in memory for tsnet, a
// unix socket for tailscaled) that answers from the netmap in microseconds;
// one that takes longer means tailscaled is wedged, and the caller is better
// served by an error it can retry than by a request that hangs.
const whoIsTimeout = 5 * time.Second

// Policy decides, on every request, who is calling and whether they may.
type Policy struct {
	WhoIs WhoIser
	// NodeTag makes a device a node; DefaultNodeTag when empty.
	NodeTag string
	// AllowUntaggedNodes lets an untagged device use the node API (enroll and
	// stream) as well. Off by default: an untagged device belongs to a
	// person, and a node enrolled from it runs other people's tasks with
	// that person's tailnet rights.
	AllowUntaggedNodes bool
	Log                *slog.Logger
}

func (p *Policy) nodeTag() string {
	if p.NodeTag == "" {
		return DefaultNodeTag
	}
	return p.NodeTag
}

// Identify asks Tailscale who is at addr (the connection's remote address)
// and classifies the answer. Errors are Connect errors a caller can read.
func (p *Policy) Identify(ctx context.Context, addr string) (Caller, error) {
	ctx, cancel := context.WithTimeout(ctx, whoIsTimeout)
	defer cancel()
	who, err := p.WhoIs.WhoIs(ctx, addr)
	switch {
	case errors.Is(err, ErrNotPeer):
		return Caller{}, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("%w: no device has the address %s; reach the coordinator through Tailscale", ErrNotPeer, host(addr)))
	case err != nil:
		return Caller{}, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("cannot ask Tailscale who is calling from %s (%v); retry, and check the coordinator's Tailscale state", host(addr), err))
	}
	c, err := Classify(who, p.nodeTag())
	switch {
	case errors.Is(err, ErrNotPeer):
		return c, connect.NewError(connect.CodeUnauthenticated, err)
	case err != nil:
		return c, connect.NewError(connect.CodePermissionDenied, err)
	}
	return c, nil
}

// NodeAPI is the interceptor for NodeService: nodes only, and untagged
// devices when the operator allowed them. It does not replace the node key:
// Hello and uploads still prove which node is calling; this only proves the
// device may be one.
func (p *Policy) NodeAPI() connect.Interceptor {
	return &guard{p: p, admit: func(c Caller, _ string) error {
		switch {
		case c.Kind == KindNode:
			return nil
		case c.Kind == KindPerson && p.AllowUntaggedNodes:
			return nil
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"device %s (%s) is not tagged %s, and nodes must be tagged devices: tag it (tailscale up --advertise-tags=%s, "+
				"or join it with an auth key that carries the tag), or start the coordinator with --allow-untagged-nodes",
			c.Device, c.Login, p.nodeTag(), p.nodeTag()))
	}}
}

// PeopleAPI is the interceptor for TaskService and AdminService: people
// only. Nodes may also call the procedures in alsoNodes (WhoAmI), which tell
// them nothing about anyone else.
func (p *Policy) PeopleAPI(alsoNodes ...string) connect.Interceptor {
	return &guard{p: p, admit: func(c Caller, procedure string) error {
		if c.Kind == KindPerson || slices.Contains(alsoNodes, procedure) {
			return nil
		}
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"device %s is a Podium node (%s): nodes may use only the node API; run podium from a person's untagged device",
			c.Device, p.nodeTag()))
	}}
}

// guard identifies the caller of each call, refuses it unless admit says
// yes, and passes the caller on in the context.
type guard struct {
	p     *Policy
	admit func(c Caller, procedure string) error
}

func (g *guard) check(ctx context.Context, addr, procedure string) (context.Context, error) {
	c, err := g.p.Identify(ctx, addr)
	if err == nil {
		err = g.admit(c, procedure)
	}
	if err != nil {
		if g.p.Log != nil {
			g.p.Log.Warn("tailnet caller refused", "peer", addr, "device", c.Device, "login", c.Login,
				"tags", c.Tags, "procedure", procedure, "why", err)
		}
		return ctx, err
	}
	return WithCaller(ctx, c), nil
}

func (g *guard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := g.check(ctx, req.Peer().Addr, req.Spec().Procedure)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (g *guard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *guard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := g.check(ctx, conn.Peer().Addr, conn.Spec().Procedure)
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

func host(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}
