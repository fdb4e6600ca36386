package admin

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// RegistryLogin seals and stores a registry login. The password is neither
// logged nor returned; the log says who set which host and user name.
func (s *Service) RegistryLogin(ctx context.Context, req *connect.Request[podiumv1.RegistryLoginRequest]) (*connect.Response[podiumv1.RegistryLoginResponse], error) {
	host, user, pw := req.Msg.GetHost(), req.Msg.GetUsername(), req.Msg.GetPassword()
	if err := secrets.CheckRegistryLogin(host, user, pw); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	who := callerName(ctx)
	created, err := s.secrets.SetRegistry(ctx, host, user, pw, who)
	switch {
	case errors.Is(err, secrets.ErrNoKey):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("registry login set", "registry", host, "username", user, "by", who, "created", created)
	return connect.NewResponse(&podiumv1.RegistryLoginResponse{Created: created}), nil
}

// ListRegistries lists registry logins: hosts, user names, who set them,
// when. Never passwords.
func (s *Service) ListRegistries(ctx context.Context, _ *connect.Request[podiumv1.ListRegistriesRequest]) (*connect.Response[podiumv1.ListRegistriesResponse], error) {
	rows, err := s.store.ListRegistries(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListRegistriesResponse{}
	for _, r := range rows {
		out.Registries = append(out.Registries, &podiumv1.Registry{Host: r.Host, Username: r.Username, SetBy: r.SetBy, SetAt: timestamppb.New(r.SetAt)})
	}
	return connect.NewResponse(out), nil
}

// RemoveRegistry forgets a registry login. Tasks already assigned keep the
// login they were sent; later pulls from the host go without one.
func (s *Service) RemoveRegistry(ctx context.Context, req *connect.Request[podiumv1.RemoveRegistryRequest]) (*connect.Response[podiumv1.RemoveRegistryResponse], error) {
	host := req.Msg.GetHost()
	if err := secrets.CheckRegistryHost(host); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	err := s.store.DeleteRegistry(ctx, host)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no registry login for %s (see `podium registry ls`)", host))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("registry login removed", "registry", host, "by", callerName(ctx))
	return connect.NewResponse(&podiumv1.RemoveRegistryResponse{}), nil
}
