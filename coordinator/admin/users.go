package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// UserTokenPrefix starts every personal API token, so one found in a file or
// a log can be recognised for what it is.
const UserTokenPrefix = "podium_ut_"

// AddUser adds a person with a role. Their personal API token is returned
// once; only its SHA-256 is stored, and it is never logged.
func (s *Service) AddUser(ctx context.Context, req *connect.Request[podiumv1.AddUserRequest]) (*connect.Response[podiumv1.AddUserResponse], error) {
	name, role, err := nameAndRole(req.Msg.GetName(), req.Msg.GetRole())
	if err != nil {
		return nil, err
	}
	if err := checkUserGroups(req.Msg.GetGroups()); err != nil {
		return nil, err
	}
	token, hash := newUserToken()
	by := caller(ctx)
	u, err := s.store.AddUser(ctx, name, string(role), hash, by, req.Msg.GetGroups()...)
	switch {
	case errors.Is(err, store.ErrExists):
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
			"user %s exists: change their role with `podium user set-role %s ROLE`, or give them a new token with `podium user rotate-token %s`", name, name, name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user added", "user", name, "role", role, "by", by)
	return connect.NewResponse(&podiumv1.AddUserResponse{User: userProto(u), Token: token}), nil
}

// RotateUserToken gives a person a new personal API token, returned once,
// and ends the old one. Anyone may rotate their own token (a leaked token is
// its holder's to replace at once, without waiting for an admin); only an
// admin may rotate another person's, which is checked here, where the name
// is known.
func (s *Service) RotateUserToken(ctx context.Context, req *connect.Request[podiumv1.RotateUserTokenRequest]) (*connect.Response[podiumv1.RotateUserTokenResponse], error) {
	self := caller(ctx)
	name := req.Msg.GetName()
	if name == "" {
		name = self
	}
	if err := access.CheckName(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if name != self && !access.IsAdmin(ctx) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"you may rotate only your own token (podium user rotate-token, without a NAME); ask an admin to rotate %s's", name))
	}
	if err := access.Reserved(name); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"%s is the coordinator's bootstrap token (--token), not a person's: replace it by restarting the coordinator with a new one", name))
	}
	token, hash := newUserToken()
	u, err := s.store.SetUserToken(ctx, name, hash)
	switch {
	case errors.Is(err, store.ErrNotFound) && name == self:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf(
			"you (%s) have no personal token to rotate: the tailnet names you, or an admin has not added you with `podium user add`", name))
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no user %s (podium user ls lists them)", name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user token rotated", "user", name, "by", self)
	return connect.NewResponse(&podiumv1.RotateUserTokenResponse{User: userProto(u), Token: token}), nil
}

// ListUsers lists every person the coordinator knows, never their tokens.
func (s *Service) ListUsers(ctx context.Context, _ *connect.Request[podiumv1.ListUsersRequest]) (*connect.Response[podiumv1.ListUsersResponse], error) {
	us, err := s.store.ListUsers(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListUsersResponse{}
	for _, u := range us {
		out.Users = append(out.Users, userProto(u))
	}
	return connect.NewResponse(out), nil
}

// RemoveUser forgets a person; their token stops working with the next call.
func (s *Service) RemoveUser(ctx context.Context, req *connect.Request[podiumv1.RemoveUserRequest]) (*connect.Response[podiumv1.RemoveUserResponse], error) {
	name := req.Msg.GetName()
	if err := access.CheckName(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	err := s.store.RemoveUser(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no user %s (podium user ls lists them)", name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user removed", "user", name, "by", caller(ctx))
	return connect.NewResponse(&podiumv1.RemoveUserResponse{}), nil
}

// SetUserRole changes a person's role, from their next call on.
func (s *Service) SetUserRole(ctx context.Context, req *connect.Request[podiumv1.SetUserRoleRequest]) (*connect.Response[podiumv1.SetUserRoleResponse], error) {
	name, role, err := nameAndRole(req.Msg.GetName(), req.Msg.GetRole())
	if err != nil {
		return nil, err
	}
	u, err := s.store.SetUserRole(ctx, name, string(role))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no user %s: add them with `podium user add %s --role %s`", name, name, role))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user role set", "user", name, "role", role, "by", caller(ctx))
	return connect.NewResponse(&podiumv1.SetUserRoleResponse{User: userProto(u)}), nil
}

// SetUserWeight changes a person's fair-share weight, from the leader's next
// dispatch pass on. A weight outside 1..store.MaxWeight is refused and
// nothing is stored.
func (s *Service) SetUserWeight(ctx context.Context, req *connect.Request[podiumv1.SetUserWeightRequest]) (*connect.Response[podiumv1.SetUserWeightResponse], error) {
	name, weight := req.Msg.GetName(), req.Msg.GetWeight()
	if err := access.CheckName(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := access.Reserved(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if weight < 1 || weight > store.MaxWeight {
		return nil, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("weight: %d is out of range: give a whole number from 1 (the default) to %d", weight, store.MaxWeight))
	}
	u, err := s.store.SetUserWeight(ctx, name, weight)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no user %s: add them with `podium user add %s --role member` first", name, name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user weight set", "user", name, "weight", weight, "by", caller(ctx))
	return connect.NewResponse(&podiumv1.SetUserWeightResponse{User: userProto(u)}), nil
}

// nameAndRole checks the name and role of a user being added or given a
// role. A reserved name (access.Reserved) is refused for both: a row by one
// is ignored for sign-in, and only removing it makes sense.
func nameAndRole(name, role string) (string, access.Role, error) {
	if err := access.CheckName(name); err != nil {
		return "", "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := access.Reserved(name); err != nil {
		return "", "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	r, err := access.ParseRole(role)
	if err != nil {
		return "", "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("role: %w", err))
	}
	return name, r, nil
}

func newUserToken() (token string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("admin: crypto/rand failed: " + err.Error())
	}
	token = UserTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(token))
	return token, h[:]
}

func caller(ctx context.Context) string {
	if c, ok := access.Caller(ctx); ok {
		return c.Name()
	}
	return ""
}

func userProto(u store.User) *podiumv1.User {
	return &podiumv1.User{Name: u.Name, Role: u.Role, CreatedAt: timestamppb.New(u.CreatedAt), CreatedBy: u.CreatedBy, Weight: u.Weight,
		Groups: u.Groups}
}

// MaxAuditEntries bounds one page of the audit log.
const MaxAuditEntries = 10000

// ListAudit reads the audit log, newest first.
func (s *Service) ListAudit(ctx context.Context, req *connect.Request[podiumv1.ListAuditRequest]) (*connect.Response[podiumv1.ListAuditResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit < 0 || limit > MaxAuditEntries {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limit: want 0 (default 100) to %d", MaxAuditEntries))
	}
	user := req.Msg.GetUser()
	if user != "" && user != "token" {
		if err := access.CheckName(user); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("user: %w", err))
		}
	}
	var since time.Time
	if req.Msg.GetSince() != nil {
		since = req.Msg.GetSince().AsTime()
	}
	rows, err := s.store.ListAudit(ctx, since, user, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListAuditResponse{}
	for _, r := range rows {
		out.Entries = append(out.Entries, &podiumv1.AuditEntry{Id: r.ID, At: timestamppb.New(r.At), Who: r.Who, Role: r.Role,
			Transport: r.Transport, Action: r.Action, Target: r.Target, Result: r.Result})
	}
	return connect.NewResponse(out), nil
}

// SetUserGroups replaces the fair-share groups a person may submit to
// (TaskSpec.group), from their next submit on. Each name must be one a
// spec's group accepts, at most store.MaxUserGroups of them; an empty list
// takes the person out of every group. Nothing is stored on a refusal.
func (s *Service) SetUserGroups(ctx context.Context, req *connect.Request[podiumv1.SetUserGroupsRequest]) (*connect.Response[podiumv1.SetUserGroupsResponse], error) {
	name, groups := req.Msg.GetName(), req.Msg.GetGroups()
	if err := access.CheckName(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := access.Reserved(name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := checkUserGroups(groups); err != nil {
		return nil, err
	}
	u, err := s.store.SetUserGroups(ctx, name, groups)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no user %s: add them with `podium user add %s --role member --group GROUP`", name, name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("user groups set", "user", name, "groups", u.Groups, "by", caller(ctx))
	return connect.NewResponse(&podiumv1.SetUserGroupsResponse{User: userProto(u)}), nil
}

// checkUserGroups refuses more than store.MaxUserGroups groups, or a name
// no spec's group could give (checkGroup's rule), naming the first bad one.
func checkUserGroups(groups []string) error {
	if len(groups) > store.MaxUserGroups {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"groups: %d groups is more than %d: a user belongs to a few teams; give fewer", len(groups), store.MaxUserGroups))
	}
	for _, g := range groups {
		if !taskspec.ValidGroup(g) {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"groups: %q is not a group name: use letters, digits and . _ / -, at most %d bytes, as a spec's group: names it",
				clipName(g), taskspec.MaxGroupBytes))
		}
	}
	return nil
}
