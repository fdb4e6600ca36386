package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// tokenCaller is all the local transport knows of a caller with the token.
var tokenCaller = tailnet.Caller{Kind: tailnet.KindToken}

// tokenGate admits calls of the task and admin APIs that carry the configured
// bearer token, and refuses the rest before anything reads their body: Connect
// reads and decodes a unary call's body before any interceptor runs, so a
// token checked in an interceptor would come after the work an anonymous
// caller can make the replica do. Node calls do not pass through it: nodes
// prove themselves with their node key, in their first message, which the
// node API's size bound and the stream's hello timeout keep small and short.
type tokenGate struct {
	token string
	next  http.Handler
	errs  *connect.ErrorWriter
}

var errNoToken = errors.New("the API token was missing or wrong: set PODIUM_TOKEN (or --token) to the coordinator's token")

func newTokenGate(token string, next http.Handler) *tokenGate {
	return &tokenGate{token: token, next: next, errs: connect.NewErrorWriter()}
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isPeopleAPI(r.URL.Path) {
		g.next.ServeHTTP(w, r)
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) != 1 {
		// The answer is in the protocol the caller speaks (Connect, gRPC or
		// gRPC-Web), so a client reports it as Unauthenticated.
		err := connect.NewError(connect.CodeUnauthenticated, errNoToken)
		if !g.errs.IsSupported(r) {
			http.Error(w, errNoToken.Error(), http.StatusUnauthorized)
			return
		}
		_ = g.errs.Write(w, r, err)
		return
	}
	g.next.ServeHTTP(w, r.WithContext(tailnet.WithCaller(r.Context(), tokenCaller)))
}

// requestedBy names the caller that tokenGate or an earlier interceptor
// identified for the task service, which records it as requested_by on what
// is submitted and in a cancel's reason: a person's login on the tailnet,
// "token" on loopback.
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
