package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
)

// auditor gives every call that changes something (access.Mutating) its
// audit row. It goes outside the role check, so that refusals are recorded
// too, and puts the row in the call's context, where the store writes it in
// the transaction that makes the change (requestedBy, inside the role
// check, fills in who and the role they were given). A call that failed or
// was refused gets its row here, with the error's code as result; so does
// one that succeeded without the store having written it.
type auditor struct {
	store     *store.Store
	transport string
	log       *slog.Logger
}

func (au auditor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		if !access.Mutating(proc) {
			return next(ctx, req)
		}
		a := &store.Audit{Action: access.Action(proc), Transport: au.transport, Target: boundTarget(target(req.Any()))}
		if c, ok := tailnet.CallerFrom(ctx); ok {
			a.Who, a.Role = c.Name(), c.Role
		}
		res, err := next(store.WithAudit(ctx, a), req)
		if a.Written() {
			return res, err
		}
		result := "ok"
		if err != nil {
			result = connect.CodeOf(err).String()
		}
		// The call is answered once this returns; a Postgres that does not
		// answer must not hold the caller forever.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		werr := au.store.WriteAudit(actx, a, result)
		cancel()
		if werr != nil {
			au.log.Error("audit row not written", "action", a.Action, "who", a.Who, "target", a.Target, "result", result, "err", werr)
		}
		return res, err
	}
}

func (auditor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streams through: none of them changes
// anything (Events and DownloadArtifact read).
func (auditor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// target is what a request acts on: a task, node, user, secret or registry
// host.
func target(msg any) string {
	switch m := msg.(type) {
	case interface{ GetNodeId() string }:
		return m.GetNodeId()
	case interface{ GetId() string }:
		return m.GetId()
	case interface{ GetName() string }:
		return m.GetName()
	case interface{ GetHost() string }:
		return m.GetHost()
	}
	return ""
}

// maxTarget bounds what an audit row keeps of a request's target. A refused
// request is audited before anything validates it, so its id or name is
// whatever the caller sent, up to the API's body limit.
const maxTarget = 256

// boundTarget cuts t to maxTarget bytes on a UTF-8 boundary and says how long
// it was, so a hostile name costs the audit log a fixed amount.
func boundTarget(t string) string {
	if len(t) <= maxTarget {
		return t
	}
	cut := maxTarget
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", t[:cut], len(t))
}
