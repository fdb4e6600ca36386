package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// tokenCaller is all the local transport knows of a caller with the
// bootstrap token: the coordinator's own admin.
var tokenCaller = tailnet.Caller{Kind: tailnet.KindToken, Role: string(access.Admin), RoleFrom: "bootstrap token"}

// Users is what the gate reads of personal API tokens.
type Users interface {
	UserByTokenHash(ctx context.Context, h []byte) (store.User, error)
}

// tokenGate admits calls of the task and admin APIs that carry the configured
// bearer token, and refuses the rest before anything reads their body: Connect
// reads and decodes a unary call's body before any interceptor runs, so a
// token checked in an interceptor would come after the work an anonymous
// caller can make the replica do. Node calls do not pass through it: nodes
// prove themselves with their node key, in their first message, which the
// node API's size bound and the stream's hello timeout keep small and short.
//
// A personal API token (podium user add) is looked up by its SHA-256: one
// indexed read, still before the body.
type tokenGate struct {
	token string
	users Users
	next  http.Handler
	errs  *connect.ErrorWriter
}

var errNoToken = errors.New("the API token was missing or wrong: set PODIUM_TOKEN (or --token, or `podium login`) " +
	"to your personal token (podium user add) or the coordinator's token")

func newTokenGate(token string, users Users, next http.Handler) *tokenGate {
	return &tokenGate{token: token, users: users, next: next, errs: connect.NewErrorWriter()}
}

// caller decides who presented got; ok false when nobody did.
func (g *tokenGate) caller(r *http.Request, got string) (tailnet.Caller, bool, error) {
	if subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) == 1 {
		return tokenCaller, true, nil
	}
	if got == "" || len(got) > maxTokenBytes {
		return tailnet.Caller{}, false, nil
	}
	h := sha256.Sum256([]byte(got))
	u, err := g.users.UserByTokenHash(r.Context(), h[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tailnet.Caller{}, false, nil
	case err != nil:
		return tailnet.Caller{}, false, err
	}
	return tailnet.Caller{Kind: tailnet.KindUser, Login: u.Name, Role: u.Role, RoleFrom: "user"}, true, nil
}

// maxTokenBytes bounds what is hashed and looked up; tokens are far shorter.
const maxTokenBytes = 512

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isPeopleAPI(r.URL.Path) {
		g.next.ServeHTTP(w, r)
		return
	}
	got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c, ok, err := g.caller(r, got)
	if err != nil {
		g.write(w, r, connect.NewError(connect.CodeUnavailable, fmt.Errorf("cannot check the API token: %w; retry", err)))
		return
	}
	if !ok {
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
	g.next.ServeHTTP(w, r.WithContext(tailnet.WithCaller(r.Context(), c)))
}

func (g *tokenGate) write(w http.ResponseWriter, r *http.Request, err *connect.Error) {
	if !g.errs.IsSupported(r) {
		http.Error(w, err.Message(), http.StatusServiceUnavailable)
		return
	}
	_ = g.errs.Write(w, r, err)
}

// requestedBy names the caller that tokenGate or an earlier interceptor
// identified (with the role access gave it) for the audit row and for the
// task service, which records it as requested_by on what
// is submitted and in a cancel's reason: a person's login on the tailnet,
// "token" on loopback.
type requestedBy struct{}

func (requestedBy) with(ctx context.Context) context.Context {
	if c, ok := tailnet.CallerFrom(ctx); ok {
		if a := store.AuditFrom(ctx); a != nil {
			a.Who, a.Role = c.Name(), c.Role
		}
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
