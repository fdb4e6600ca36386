package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/access"
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

// auditSecret names the secret as the target of a grant's or revoke's audit
// row ("secret NAME", beside the principals' names the call is about). A
// name that is not one keeps the target the server gave it (bounded there),
// as does a call the role check refused before it got here.
func auditSecret(ctx context.Context, name string) {
	if a := store.AuditFrom(ctx); a != nil && taskspec.SecretNameProblem(name) == "" {
		a.Target = "secret " + name
	}
}

// SetSecret seals and stores a secret, and grants it to req.allow (added to
// the grants it has) in the same transaction. The value is neither logged
// nor returned; the log says who set which name.
func (s *Service) SetSecret(ctx context.Context, req *connect.Request[podiumv1.SetSecretRequest]) (*connect.Response[podiumv1.SetSecretResponse], error) {
	name, value := req.Msg.GetName(), req.Msg.GetValue()
	if err := secrets.CheckValue(name, value); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	var allow []string
	if len(req.Msg.GetAllow()) > 0 {
		var err error
		if allow, err = secrets.CheckPrincipals(req.Msg.GetAllow()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("allow: %w", err))
		}
	}
	who := callerName(ctx)
	created, err := s.secrets.Set(ctx, name, value, who, allow...)
	switch {
	case errors.Is(err, secrets.ErrNoKey):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, store.ErrTooManyGrants):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("allow: %w; nothing was set", err))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("secret set", "secret", name, "by", who, "created", created, "allow", allow)
	return connect.NewResponse(&podiumv1.SetSecretResponse{Created: created}), nil
}

// ListSecrets lists secrets: names, who set them, when; never values. An
// admin sees every secret with whom it is granted to; anyone else (a
// member: viewers are refused before this) sees only the secrets they may
// use, without their grants, which name other people. What a member may use
// is decided as at submit (secrets.Usable).
func (s *Service) ListSecrets(ctx context.Context, _ *connect.Request[podiumv1.ListSecretsRequest]) (*connect.Response[podiumv1.ListSecretsResponse], error) {
	rows, err := s.store.ListSecrets(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	admin := access.IsAdmin(ctx)
	usable, all := []string(nil), admin
	if !admin {
		if usable, all, err = secrets.Usable(ctx, s.store, callerName(ctx)); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
	}
	out := &podiumv1.ListSecretsResponse{}
	for _, r := range rows {
		if !all && !slices.Contains(usable, r.Name) {
			continue
		}
		p := secretProto(r)
		if !admin {
			p.Allow = nil
		}
		out.Secrets = append(out.Secrets, p)
	}
	return connect.NewResponse(out), nil
}

// DeleteSecret removes a secret and its grants. Tasks already assigned keep
// the value they were sent; a task submitted or assigned afterwards that
// names it is refused.
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

// grantRequest checks a grant's or revoke's secret name and principals.
func grantRequest(name string, principals []string) ([]string, error) {
	if p := taskspec.SecretNameProblem(name); p != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(p))
	}
	ps, err := secrets.CheckPrincipals(principals)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return ps, nil
}

func secretProto(r store.SecretRow) *podiumv1.Secret {
	return &podiumv1.Secret{Name: r.Name, SetBy: r.SetBy, SetAt: timestamppb.New(r.SetAt), Allow: r.Allow, Version: int64(r.Version)}
}

// GrantSecret lets principals use a secret, from their next submit on (and
// their queued tasks' assignments). Admin only (access.Needs leaves it
// out); the audit row names the secret.
func (s *Service) GrantSecret(ctx context.Context, req *connect.Request[podiumv1.GrantSecretRequest]) (*connect.Response[podiumv1.GrantSecretResponse], error) {
	name := req.Msg.GetName()
	auditSecret(ctx, name)
	ps, err := grantRequest(name, req.Msg.GetPrincipals())
	if err != nil {
		return nil, err
	}
	who := callerName(ctx)
	r, err := s.store.GrantSecret(ctx, name, ps, who)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no secret named %s: set it first with `podium secret set %s --allow ...` (see `podium secret ls`)", name, name))
	case errors.Is(err, store.ErrTooManyGrants):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("secret %s: %w; nothing was granted", name, err))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("secret granted", "secret", name, "to", ps, "by", who)
	return connect.NewResponse(&podiumv1.GrantSecretResponse{Secret: secretProto(r)}), nil
}

// RevokeSecret takes principals off a secret's grants. Each must be granted
// now (else nothing changes and the error says what is). A queued task whose
// owner no longer may use the secret fails at its assignment, without it.
func (s *Service) RevokeSecret(ctx context.Context, req *connect.Request[podiumv1.RevokeSecretRequest]) (*connect.Response[podiumv1.RevokeSecretResponse], error) {
	name := req.Msg.GetName()
	auditSecret(ctx, name)
	ps, err := grantRequest(name, req.Msg.GetPrincipals())
	if err != nil {
		return nil, err
	}
	r, err := s.store.RevokeSecret(ctx, name, ps)
	var notGranted *store.NotGrantedError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no secret named %s (see `podium secret ls`)", name))
	case errors.As(err, &notGranted):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.log.Info("secret revoked", "secret", name, "from", ps, "by", callerName(ctx))
	return connect.NewResponse(&podiumv1.RevokeSecretResponse{Secret: secretProto(r)}), nil
}
