package transport

import (
	"context"
	"net"
)

// DialFunc opens a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Option changes how NewClient's client connects.
type Option func(*options)

type options struct {
	dial DialFunc
}

// WithDial makes the client open every connection with dial, e.g. through an
// embedded tailnet device (Tailnet.Dial).
func WithDial(dial DialFunc) Option {
	return func(o *options) { o.dial = dial }
}

type dialerKey struct{}

// ContextWithDialer returns ctx carrying dial, which clients from NewClient
// use for requests made with ctx (or a context derived from it).
//
// Why a context and not only WithDial: the agent builds its clients deep
// inside enrollment and the session, for URLs it learns at run time (the
// replica list in HelloAck). When the agent joins the tailnet with its own
// embedded device, the one place that knows it is main; the dialer travels
// from there with the context the agent runs on, and every connection made
// on the agent's behalf goes through the tailnet without each constructor
// having to carry it.
func ContextWithDialer(ctx context.Context, dial DialFunc) context.Context {
	return context.WithValue(ctx, dialerKey{}, dial)
}

func dialerFrom(ctx context.Context) DialFunc {
	d, _ := ctx.Value(dialerKey{}).(DialFunc)
	return d
}
