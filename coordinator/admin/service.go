// Package admin serves podium.v1.AdminService: what operators do to the fleet,
// starting with enrollment tokens and the list of nodes.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/internal/taskspec"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// DefaultTokenTTL is how long an enrollment token lives unless asked otherwise.
const DefaultTokenTTL = time.Hour

// Service implements podium.v1.AdminService.
type Service struct {
	cfg     Config
	store   *store.Store
	secrets *secrets.Vault
	log     *slog.Logger
}

// Config is what the admin service reports about the coordinator.
type Config struct {
	// Transport is the one the coordinator serves on (local, tailnet or
	// host), for WhoAmI.
	Transport string
}

// Deps are what the admin service works with.
type Deps struct {
	Store *store.Store
	// Secrets seals and stores secrets; nil means a vault without a key.
	Secrets *secrets.Vault
	Log     *slog.Logger
}

// NewService returns the admin service.
func NewService(cfg Config, deps Deps) *Service {
	v := deps.Secrets
	if v == nil {
		v = secrets.NewVault(nil, deps.Store)
	}
	return &Service{cfg: cfg, store: deps.Store, secrets: v, log: deps.Log}
}

// CreateEnrollmentToken makes a single-use token. The token is shown once;
// only its SHA-256 is stored. The node it enrolls carries exactly its labels
// unless allow_node_labels lets the node add its own: labels steer work, and
// secrets with it, so by default a node does not choose them.
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
	token, hash := enroll.NewSecret(enroll.TokenPrefix)
	expires := time.Now().Add(ttl)
	allow := req.Msg.GetAllowNodeLabels()
	if err := s.store.CreateToken(ctx, hash, req.Msg.GetLabels(), allow, expires); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("enrollment token created", "labels", req.Msg.GetLabels(), "allow_node_labels", allow,
		"expires", expires, "by", callerName(ctx))
	return connect.NewResponse(&podiumv1.CreateEnrollmentTokenResponse{
		Token: token, ExpiresAt: timestamppb.New(expires), Labels: req.Msg.GetLabels(), AllowNodeLabels: allow}), nil
}

// ListNodes lists every enrolled node with its stored health.
func (s *Service) ListNodes(ctx context.Context, _ *connect.Request[podiumv1.ListNodesRequest]) (*connect.Response[podiumv1.ListNodesResponse], error) {
	ns, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	devices, err := s.store.NodeDevices(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	// The coordinator's version is the agent version its apt repository
	// serves: `podium nodes` flags the nodes an upgrade would move.
	out := &podiumv1.ListNodesResponse{CoordinatorVersion: version.Version}
	admin := access.IsAdmin(ctx)
	for _, n := range ns {
		p := nodeProto(n)
		if d, ok := devices[n.ID]; ok {
			p.TailscaleDeviceId, p.TailscaleDevice = d.ID, d.Name
		}
		if !admin {
			memberView(p)
		}
		out.Nodes = append(out.Nodes, p)
	}
	return connect.NewResponse(out), nil
}

// memberView leaves out of a node what only admins see: which tailnet
// device it is, which replica holds its stream, and who set each of its
// labels (the labels themselves, what placement matches, stay).
func memberView(p *podiumv1.Node) {
	p.TailscaleDeviceId, p.TailscaleDevice, p.Replica = "", "", ""
	for _, l := range p.LabelSources {
		l.SetBy = ""
	}
}

func (s *Service) nodeError(err error, nodeID string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no node %s (see `podium nodes`)", nodeID))
	case errors.Is(err, store.ErrNodeBusy):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s cannot be removed: %w", nodeID, err))
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

func (s *Service) change(ctx context.Context, nodeID string, c store.NodeChange) (*podiumv1.Node, error) {
	if nodeID == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("node_id: required"))
	}
	n, err := s.store.ChangeNode(ctx, nodeID, c)
	if err != nil {
		return nil, s.nodeError(err, nodeID)
	}
	// The live half: whichever replica holds the node's stream pushes it now.
	_ = s.store.Notify(ctx, store.ChannelNodeCommands, nodeID)
	// A drain, a cut or a label change can leave queued tasks with nowhere to go,
	// and an undrain or a raise can give them somewhere.
	_ = s.store.Notify(ctx, store.ChannelSubmit, store.PayloadFleet)
	return nodeProto(n), nil
}

// DrainNode stops giving a node work, or starts again. Its running tasks
// finish. The flag is stored on the node's row, so a node that is offline now
// obeys it when it comes back.
func (s *Service) DrainNode(ctx context.Context, req *connect.Request[podiumv1.DrainNodeRequest]) (*connect.Response[podiumv1.DrainNodeResponse], error) {
	d := req.Msg.GetDraining()
	n, err := s.change(ctx, req.Msg.GetNodeId(), store.NodeChange{Draining: &d})
	if err != nil {
		return nil, err
	}
	s.log.Info("node drain changed", "node", n.Id, "draining", d)
	return connect.NewResponse(&podiumv1.DrainNodeResponse{Node: n}), nil
}

// SetNodeSlots overrides how many tasks a node may run at once; 0 goes back to
// the node's own number.
func (s *Service) SetNodeSlots(ctx context.Context, req *connect.Request[podiumv1.SetNodeSlotsRequest]) (*connect.Response[podiumv1.SetNodeSlotsResponse], error) {
	m := req.Msg.GetMaxTasks()
	if m < 0 || m > 10000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("max_tasks: want 0 (the node's own number) to 10000"))
	}
	n, err := s.change(ctx, req.Msg.GetNodeId(), store.NodeChange{MaxTasksOverride: &m})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.SetNodeSlotsResponse{Node: n}), nil
}

// SetNodeLabels adds and removes a node's labels. Labels it adds are the
// caller's (source "admin"), whatever gave them before.
func (s *Service) SetNodeLabels(ctx context.Context, req *connect.Request[podiumv1.SetNodeLabelsRequest]) (*connect.Response[podiumv1.SetNodeLabelsResponse], error) {
	for _, l := range append(append([]string{}, req.Msg.GetAdd()...), req.Msg.GetRemove()...) {
		if p := taskspec.LabelProblem(l); p != "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("label %q: %s", l, p))
		}
	}
	if len(req.Msg.GetAdd()) == 0 && len(req.Msg.GetRemove()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("nothing to change: give labels to add or remove"))
	}
	for _, l := range req.Msg.GetAdd() {
		if slices.Contains(req.Msg.GetRemove(), l) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("label %q is both added and removed: give it once", l))
		}
	}
	n, err := s.change(ctx, req.Msg.GetNodeId(), store.NodeChange{AddLabels: req.Msg.GetAdd(), RemoveLabels: req.Msg.GetRemove(),
		By: callerName(ctx)})
	if err != nil {
		return nil, err
	}
	s.log.Info("node labels changed", "node", n.Id, "added", req.Msg.GetAdd(), "removed", req.Msg.GetRemove(), "by", callerName(ctx))
	return connect.NewResponse(&podiumv1.SetNodeLabelsResponse{Node: n}), nil
}

// RemoveNode forgets a node that is drained or gone and holds no tasks.
func (s *Service) RemoveNode(ctx context.Context, req *connect.Request[podiumv1.RemoveNodeRequest]) (*connect.Response[podiumv1.RemoveNodeResponse], error) {
	id := req.Msg.GetNodeId()
	if err := s.store.RemoveNode(ctx, id); err != nil {
		return nil, s.nodeError(err, id)
	}
	_ = s.store.Notify(ctx, store.ChannelTakeover, id) // its session, if any, ends
	_ = s.store.Notify(ctx, store.ChannelSubmit, store.PayloadFleet)
	s.log.Info("node removed", "node", id)
	return connect.NewResponse(&podiumv1.RemoveNodeResponse{}), nil
}

// RekeyNode makes a single-use token that re-enrolls the node from whichever
// device uses it. It is the way out of "node key presented from another
// device": the operator says, once, that the node has moved. Until the token
// is used the node keeps its key and device, so a token that is never used
// changes nothing.
func (s *Service) RekeyNode(ctx context.Context, req *connect.Request[podiumv1.RekeyNodeRequest]) (*connect.Response[podiumv1.RekeyNodeResponse], error) {
	id := req.Msg.GetNodeId()
	if id == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("node_id: required (see `podium nodes`)"))
	}
	ttl := time.Duration(req.Msg.GetTtlSeconds()) * time.Second
	switch {
	case req.Msg.GetTtlSeconds() < 0:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_seconds: must not be negative (0 means one hour)"))
	case ttl == 0:
		ttl = DefaultTokenTTL
	case ttl > 30*24*time.Hour:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_seconds: at most 30 days; rekey tokens are meant to be used soon"))
	}
	token, hash := enroll.NewSecret(enroll.TokenPrefix)
	expires := time.Now().Add(ttl)
	if err := s.store.CreateRekeyToken(ctx, hash, id, expires); err != nil {
		return nil, s.nodeError(err, id)
	}
	s.log.Info("rekey token created", "node", id, "by", callerName(ctx), "expires", expires)
	return connect.NewResponse(&podiumv1.RekeyNodeResponse{Token: token, ExpiresAt: timestamppb.New(expires), NodeId: id}), nil
}

// WhoAmI tells the caller what the coordinator decided they are: the same
// decision every other call is admitted or refused on.
func (s *Service) WhoAmI(ctx context.Context, _ *connect.Request[podiumv1.WhoAmIRequest]) (*connect.Response[podiumv1.WhoAmIResponse], error) {
	c, ok := tailnet.CallerFrom(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("the coordinator did not identify this call; this is a bug in podium-coordinator"))
	}
	out := &podiumv1.WhoAmIResponse{Login: c.Login, Device: c.Device, DeviceId: c.DeviceID, Tags: c.Tags, Transport: s.cfg.Transport,
		Role: c.Role, RoleFrom: c.RoleFrom}
	switch c.Kind {
	case tailnet.KindPerson:
		out.Kind = podiumv1.CallerKind_CALLER_KIND_PERSON
	case tailnet.KindNode:
		out.Kind = podiumv1.CallerKind_CALLER_KIND_NODE
	case tailnet.KindToken:
		out.Kind = podiumv1.CallerKind_CALLER_KIND_TOKEN
	case tailnet.KindUser:
		out.Kind = podiumv1.CallerKind_CALLER_KIND_USER
	}
	// A person's groups are their user row's: a tailnet person known only
	// by a grant, and the bootstrap token, have none (admins may submit to
	// any group regardless).
	if c.Login != "" {
		groups, _, err := s.store.UserGroups(ctx, c.Login)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read %s's groups: %w (try again)", c.Login, err))
		}
		out.Groups = groups
	}
	return connect.NewResponse(out), nil
}

func nodeProto(n store.Node) *podiumv1.Node {
	p := &podiumv1.Node{
		Id: n.ID, Hostname: n.Hostname, Labels: n.Labels, Draining: n.Draining,
		Capacity: &podiumv1.Capacity{CpuCores: n.CPUCores, MemoryMb: n.MemoryMB, DiskFreeMb: n.DiskFreeMB, MaxTasks: n.SlotLimit(),
			Limits: &podiumv1.TaskLimits{MaxCpu: n.Limits.MaxCPU, MaxMemoryMb: n.Limits.MaxMemoryMB, MaxPids: n.Limits.MaxPids,
				MaxTimeoutSeconds: n.Limits.MaxTimeoutSeconds, MaxOutputBytes: n.Limits.MaxOutputBytes, PermitEgress: n.Limits.PermitEgress}},
		RunningTasks: n.RunningTasks, FreeSlots: n.FreeSlots(), EnrolledAt: timestamppb.New(n.EnrolledAt),
		AllowPrivilegedSidecars: n.Limits.AllowPrivilegedSidecars, AgentVersion: n.AgentVersion,
	}
	p.Capacity.MinFreeDiskMb = n.Disk.MinFreeMB
	if n.Disk.LowSince != nil {
		p.Capacity.DiskLowSince = timestamppb.New(*n.Disk.LowSince)
	}
	if n.EngineDownSince != nil {
		p.Capacity.EngineDownSince = timestamppb.New(*n.EngineDownSince)
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
	for _, l := range n.LabelSources {
		p.LabelSources = append(p.LabelSources, &podiumv1.NodeLabel{Label: l.Label, Source: l.Source, SetBy: l.SetBy})
	}
	for _, g := range n.GPUs {
		p.Gpus = append(p.Gpus, &podiumv1.Gpu{Index: g.Index, Uuid: g.UUID, Model: g.Model, MemoryMb: g.MemoryMB})
	}
	return p
}
