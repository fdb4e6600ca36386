package admin

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// callerName is who the log and set_by name for this call.
func callerName(ctx context.Context) string {
	if c, ok := tailnet.CallerFrom(ctx); ok {
		return c.Name()
	}
	return "unknown"
}

// SetSecret seals and stores a secret. The value is neither logged nor
// returned; the log says who set which name.
func (s *Service) SetSecret(ctx context.Context, req *connect.Request[podiumv1.SetSecretRequest]) (*connect.Response[podiumv1.SetSecretResponse], error) {
	name, value := req.Msg.GetName(), req.Msg.GetValue()
	if err := secrets.CheckValue(name, value); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	who := callerName(ctx)
	created, err := s.secrets.Set(ctx, name, value, who)
	switch {
	case errors.Is(err, secrets.ErrNoKey):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("secret set", "secret", name, "by", who, "created", created)
	return connect.NewResponse(&podiumv1.SetSecretResponse{Created: created}), nil
}

// ListSecrets lists secrets: names, who set them, when. Never values.
func (s *Service) ListSecrets(ctx context.Context, _ *connect.Request[podiumv1.ListSecretsRequest]) (*connect.Response[podiumv1.ListSecretsResponse], error) {
	rows, err := s.store.ListSecrets(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListSecretsResponse{}
	for _, r := range rows {
		out.Secrets = append(out.Secrets, &podiumv1.Secret{Name: r.Name, SetBy: r.SetBy, SetAt: timestamppb.New(r.SetAt), Version: int64(r.Version)})
	}
	return connect.NewResponse(out), nil
}

// DeleteSecret removes a secret. Tasks already assigned keep the value they
// were sent; a task submitted or assigned afterwards that names it is refused.
func (s *Service) DeleteSecret(ctx context.Context, req *connect.Request[podiumv1.DeleteSecretRequest]) (*connect.Response[podiumv1.DeleteSecretResponse], error) {
	name := req.Msg.GetName()
	if p := taskspec.SecretNameProblem(name); p != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(p))
	}
	err := s.store.DeleteSecret(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no secret named %s (see `podium secret ls`)", name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("secret deleted", "secret", name, "by", callerName(ctx))
	return connect.NewResponse(&podiumv1.DeleteSecretResponse{}), nil
}

// GrantSecret is not served yet: secret scopes land with issue 28's secrets
// work, which replaces this.
func (s *Service) GrantSecret(context.Context, *connect.Request[podiumv1.GrantSecretRequest]) (*connect.Response[podiumv1.GrantSecretResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("secret grants are not served by this coordinator yet"))
}

// RevokeSecret is not served yet (see GrantSecret).
func (s *Service) RevokeSecret(context.Context, *connect.Request[podiumv1.RevokeSecretRequest]) (*connect.Response[podiumv1.RevokeSecretResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("secret grants are not served by this coordinator yet"))
}
