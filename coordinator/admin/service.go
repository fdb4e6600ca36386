// Package admin serves podium.v1.AdminService: what operators do to the fleet,
// starting with enrollment tokens and the list of nodes.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultTokenTTL is how long an enrollment token lives unless asked otherwise.
const DefaultTokenTTL = time.Hour

// Service implements podium.v1.AdminService.
type Service struct {
	store *store.Store
	log   *slog.Logger
}

// NewService returns the admin service.
func NewService(st *store.Store, log *slog.Logger) *Service { return &Service{store: st, log: log} }

// CreateEnrollmentToken makes a single-use token. The token is shown once;
// only its SHA-256 is stored.
func (s *Service) CreateEnrollmentToken(ctx context.Context, req *connect.Request[podiumv1.CreateEnrollmentTokenRequest]) (*connect.Response[podiumv1.CreateEnrollmentTokenResponse], error) {
	ttl := time.Duration(req.Msg.GetTtlSeconds()) * time.Second
	switch {
	case req.Msg.GetTtlSeconds() < 0:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_seconds: must not be negative (0 means one hour)"))
	case ttl == 0:
		ttl = DefaultTokenTTL
	case ttl > 30*24*time.Hour:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_seconds: at most 30 days; enrollment tokens are meant to be used soon"))
	}
	for _, l := range req.Msg.GetLabels() {
		if p := taskspec.LabelProblem(l); p != "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("labels: %q: %s", l, p))
		}
	}
	token, hash := nodes.NewSecret(nodes.TokenPrefix)
	expires := time.Now().Add(ttl)
	if err := s.store.CreateToken(ctx, hash, req.Msg.GetLabels(), expires); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("enrollment token created", "labels", req.Msg.GetLabels(), "expires", expires)
	return connect.NewResponse(&podiumv1.CreateEnrollmentTokenResponse{
		Token: token, ExpiresAt: timestamppb.New(expires), Labels: req.Msg.GetLabels()}), nil
}

// ListNodes lists every enrolled node with its stored health.
func (s *Service) ListNodes(ctx context.Context, _ *connect.Request[podiumv1.ListNodesRequest]) (*connect.Response[podiumv1.ListNodesResponse], error) {
	ns, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListNodesResponse{}
	for _, n := range ns {
		p := &podiumv1.Node{
			Id: n.ID, Hostname: n.Hostname, Labels: n.Labels, Draining: n.Draining,
			Capacity:     &podiumv1.Capacity{CpuCores: n.CPUCores, MemoryMb: n.MemoryMB, DiskFreeMb: n.DiskFreeMB, MaxTasks: n.SlotLimit()},
			RunningTasks: n.RunningTasks, FreeSlots: n.FreeSlots(), EnrolledAt: timestamppb.New(n.EnrolledAt),
		}
		switch n.Status {
		case "online":
			p.Status = podiumv1.NodeStatus_NODE_STATUS_ONLINE
		case "unreachable":
			p.Status = podiumv1.NodeStatus_NODE_STATUS_UNREACHABLE
		default:
			p.Status = podiumv1.NodeStatus_NODE_STATUS_OFFLINE
		}
		if n.LastHeartbeatAt != nil {
			p.LastHeartbeatAt = timestamppb.New(*n.LastHeartbeatAt)
		}
		if n.SessionReplica != nil {
			p.Replica = *n.SessionReplica
		}
		out.Nodes = append(out.Nodes, p)
	}
	return connect.NewResponse(out), nil
}
