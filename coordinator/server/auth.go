package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// tokenCaller is all the local transport knows of a caller with the token.
var tokenCaller = tailnet.Caller{Kind: tailnet.KindToken}

// tokenAuth admits API calls that carry the configured bearer token. Node calls
// do not pass through it: nodes prove themselves with their node key.
type tokenAuth struct{ token string }

var errNoToken = errors.New("the API token was missing or wrong: set PODIUM_TOKEN (or --token) to the coordinator's token")

func (a tokenAuth) check(h interface{ Get(string) string }) error {
	got, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) != 1 {
		return connect.NewError(connect.CodeUnauthenticated, errNoToken)
	}
	return nil
}

func (a tokenAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(req.Header()); err != nil {
			return nil, err
		}
		return next(tailnet.WithCaller(ctx, tokenCaller), req)
	}
}

func (a tokenAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a tokenAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(tailnet.WithCaller(ctx, tokenCaller), conn)
	}
}

// requestedBy names the caller that an earlier interceptor identified for the
// task service, which records it as requested_by on what is submitted and in
// a cancel's reason: a person's login on the tailnet, "token" on loopback.
type requestedBy struct{}

func (requestedBy) with(ctx context.Context) context.Context {
	if c, ok := tailnet.CallerFrom(ctx); ok {
		return context.WithValue(ctx, tasks.CallerKey{}, c.Name())
	}
	return ctx
}

func (r requestedBy) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		return next(r.with(ctx), req)
	}
}

func (requestedBy) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r requestedBy) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(r.with(ctx), conn)
	}
}
