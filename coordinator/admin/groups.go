package admin

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// SetGroupWeight changes a spec group's fair-share weight, from the leader's
// next dispatch pass on. The group need not have tasks yet: an admin weighs
// a team before its sweep. A name a spec could not carry, or a weight outside
// 1..store.MaxWeight, is refused and nothing is stored; the audit row is
// written with the change (store.SetGroupWeight).
func (s *Service) SetGroupWeight(ctx context.Context, req *connect.Request[podiumv1.SetGroupWeightRequest]) (*connect.Response[podiumv1.SetGroupWeightResponse], error) {
	name, weight := req.Msg.GetName(), req.Msg.GetWeight()
	if err := checkGroup(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if weight < 1 || weight > store.MaxWeight {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("weight: %d is out of range: give a whole number from 1 (the default) to %d", weight, store.MaxWeight))
	}
	by := caller(ctx)
	g, err := s.store.SetGroupWeight(ctx, name, weight, by)
	switch {
	case errors.Is(err, store.ErrTooMany):
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"%d groups already have a weight of their own: set a group no longer used back to 1 (podium group ls lists them) first", store.MaxGroupWeights))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("group weight set", "group", name, "weight", weight, "by", by)
	return connect.NewResponse(&podiumv1.SetGroupWeightResponse{Group: groupProto(g)}), nil
}

// ListGroups lists the groups with a weight of their own and those of the
// tasks now running or queued, with their counts.
func (s *Service) ListGroups(ctx context.Context, _ *connect.Request[podiumv1.ListGroupsRequest]) (*connect.Response[podiumv1.ListGroupsResponse], error) {
	gs, err := s.store.ListGroups(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListGroupsResponse{}
	for _, g := range gs {
		out.Groups = append(out.Groups, groupProto(g))
	}
	return connect.NewResponse(out), nil
}

// checkGroup accepts what a spec's group: accepts (taskspec's rule), so a
// weight is never set on a group no task could name.
func checkGroup(name string) error {
	if name == "" {
		return errors.New("name: required: give the group as a spec names it in group")
	}
	if !taskspec.ValidGroup(name) {
		return fmt.Errorf("name: %q is not a group name: use letters, digits and . _ / -, at most %d bytes", clipName(name), taskspec.MaxGroupBytes)
	}
	return nil
}

// clipName keeps an over-long name out of an error message's way.
func clipName(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func groupProto(g store.Group) *podiumv1.Group {
	p := &podiumv1.Group{Name: g.Name, Weight: g.Weight, SetBy: g.SetBy, Running: g.Running, Queued: g.Queued}
	if !g.SetAt.IsZero() {
		p.SetAt = timestamppb.New(g.SetAt)
	}
	return p
}
