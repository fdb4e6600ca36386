package tasks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultMaxMemberPriority is the highest spec.priority a member may give
// unless the coordinator says otherwise (--max-member-priority). Priority is
// one order for everyone, decided before fair share, so any value above the
// default 0 a member gives puts their task ahead of everyone's ordinary
// work; 0 leaves every value above it to admins, for urgent work that must
// go first. A member may still give a lower priority (for work that can
// wait), and fair share orders the rest.
const DefaultMaxMemberPriority = 0

// Bounds are what a member's spec may ask for beyond taskspec's own rules,
// which bound everyone. Admins are not bounded by them.
type Bounds struct {
	// MaxMemberPriority is the highest spec.priority a member may give.
	MaxMemberPriority int32
}

// Check refuses, with PermissionDenied, a spec a submitter called who with
// role may not submit: a member's priority above MaxMemberPriority, or a
// group the member does not belong to (their user row's groups; a tailnet
// person without one belongs to none). The message names what is not
// allowed and how to get it. Anything else, admins' specs among them,
// passes. A failure to read the member's groups is Unavailable.
//
// It is checked at submit and rerun (the caller's role), at schedule create
// (the creator's) and at every tick (the owner's role then), since a
// schedule's task runs as its owner.
func (b Bounds) Check(ctx context.Context, st *store.Store, who string, role access.Role, spec *podiumv1.TaskSpec) error {
	if role == access.Admin {
		return nil
	}
	if p := spec.GetPriority(); p > b.MaxMemberPriority {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"spec.priority: %d is above %d, the highest priority a member may give (the coordinator's --max-member-priority), "+
				"since a higher one goes ahead of everyone's work: give %d or less, or ask an admin to submit it or to raise --max-member-priority",
			p, b.MaxMemberPriority, b.MaxMemberPriority))
	}
	g := spec.GetGroup()
	if g == "" {
		return nil
	}
	groups, _, err := st.UserGroups(ctx, who)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("read %s's groups: %w (try again)", who, err))
	}
	if slices.Contains(groups, g) {
		return nil
	}
	has := who + " belongs to no group"
	if len(groups) > 0 {
		has = fmt.Sprintf("%s's groups are %s", who, strings.Join(groups, ", "))
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
		"spec.group: %s may not submit to group %q, whose fair share is its members': %s; leave group out to share as yourself, "+
			"or ask an admin: podium user set-groups %s %s",
		who, g, has, who, strings.Join(append(slices.Clone(groups), g), " ")))
}

// callerRole is the role the server gave the caller in ctx; "" if none.
func callerRole(ctx context.Context) access.Role {
	c, _ := access.Caller(ctx)
	return access.Role(c.Role)
}

// checkBounds checks spec against the service's bounds for the caller.
func (s *Service) checkBounds(ctx context.Context, spec *podiumv1.TaskSpec) error {
	who, _ := ctx.Value(CallerKey{}).(string)
	return s.bounds.Check(ctx, s.store, who, callerRole(ctx), spec)
}

// addKeyHolders fills p.ConcurrencyHolders for a queued task with a
// concurrency key: the tasks holding the key's slots now, so that whoever
// waits sees for whom (a member's cancel_older waits for other people's
// tasks rather than cancelling them). Get alone pays the query.
func (s *Service) addKeyHolders(ctx context.Context, t store.Task, p *podiumv1.Task) error {
	key := t.Spec.GetConcurrency().GetKey()
	if key == "" || t.State != store.Queued {
		return nil
	}
	hs, err := s.store.KeyHolders(ctx, key)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("read who holds concurrency key %s: %w (try again)", key, err))
	}
	for _, h := range hs {
		p.ConcurrencyHolders = append(p.ConcurrencyHolders, &podiumv1.ConcurrencyHolder{
			TaskId: h.TaskID, RequestedBy: h.RequestedBy, State: store.StateProto(h.State)})
	}
	return nil
}
