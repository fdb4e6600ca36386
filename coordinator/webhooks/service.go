// Package webhooks serves podium.v1.WebhookService: the admin's list of
// URLs the coordinator POSTs events to. The events themselves are written
// by triggers into the outbox (migration 0027) and delivered by package
// coordinator/notify.
package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// MaxNameBytes bounds a webhook's name: a DNS label's length.
const MaxNameBytes = 63

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// Service implements podium.v1.WebhookService. Every call is admin only
// (coordinator/access has no entry for them, which means admin).
type Service struct {
	store *store.Store
	// vault seals the signing secrets the service generates; without a key
	// it seals none.
	vault *secrets.Vault
	log   *slog.Logger
}

// Deps are what the webhook service works with.
type Deps struct {
	Store *store.Store
	// Vault seals the signing secrets the service generates. Nil, or a
	// vault without a key, is allowed: then a webhook needs a --secret-name,
	// and there can be none either (secrets cannot be set without a key),
	// so adding is refused with what to do.
	Vault *secrets.Vault
	// Log is where added and removed webhooks are said; nil is slog's default.
	Log *slog.Logger
}

// NewService returns the webhook service.
func NewService(deps Deps) *Service {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Service{store: deps.Store, vault: deps.Vault, log: deps.Log}
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// CheckEvents says what is wrong with a list of event types, or "".
func CheckEvents(events []string) string {
	for i, e := range events {
		if !slices.Contains(notify.Events, e) {
			return fmt.Sprintf("%q is not an event: the events are %s", e, strings.Join(notify.Events, ", "))
		}
		if slices.Contains(events[:i], e) {
			return fmt.Sprintf("%s is named twice", e)
		}
	}
	return ""
}

// Add registers a webhook, or refuses with the field named and stores
// nothing. Without a secret name it generates a signing secret, stores it
// sealed on the webhook's row (not among the secrets tasks name), and
// returns it this once.
func (s *Service) Add(ctx context.Context, req *connect.Request[podiumv1.WebhookServiceAddRequest]) (*connect.Response[podiumv1.WebhookServiceAddResponse], error) {
	m := req.Msg
	if p := taskspec.CheckWebhookURL(m.GetUrl()); p != "" {
		return nil, invalid("url: %s", p)
	}
	events := m.GetEvents()
	if len(events) == 0 {
		events = notify.Events
	}
	if p := CheckEvents(events); p != "" {
		return nil, invalid("events: %s", p)
	}
	if n := m.GetName(); n != "" && (len(n) > MaxNameBytes || !namePattern.MatchString(n)) {
		return nil, invalid("name: %q is not a webhook name (a-z, 0-9, '.', '_', '-', starting with a letter or digit, at most %d bytes)",
			clip(n), MaxNameBytes)
	}
	who := "unknown"
	if c, ok := tailnet.CallerFrom(ctx); ok {
		who = c.Name()
	}
	w := store.Webhook{ID: ids.New("hook"), Name: m.GetName(), URL: m.GetUrl(), Events: events, SecretName: m.GetSecretName(), CreatedBy: who}
	var sealed *store.SecretRow
	var shown string
	if w.SecretName != "" {
		if p := taskspec.SecretNameProblem(w.SecretName); p != "" {
			return nil, invalid("secret_name: %s", p)
		}
		missing, err := s.store.MissingSecrets(ctx, []string{w.SecretName})
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("look up secret %s: %w (try again)", w.SecretName, err))
		}
		if len(missing) > 0 {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"secret_name: no secret named %s: set it with `podium secret set %s`, or leave --secret-name out to have one generated",
				w.SecretName, w.SecretName))
		}
	} else {
		if !s.vault.HasKey() {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"the generated signing secret must be stored sealed, and %w", secrets.ErrNoKey))
		}
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		shown = hex.EncodeToString(raw)
		// Kept on the webhook's own row, sealed under associated data no
		// secret name can take: a task can name it neither in --secret nor
		// in notify[].secret (it would sign or read with the coordinator's
		// key).
		row, err := s.vault.SealWebhookKey(w.ID, []byte(shown))
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		row.SetBy = who
		sealed = &row
	}
	if a := store.AuditFrom(ctx); a != nil {
		a.Target = w.ID
	}
	out, err := s.store.AddWebhook(ctx, w, sealed)
	switch {
	case errors.Is(err, store.ErrTooManyWebhooks):
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"%d webhooks are registered, the most there may be: remove one with `podium webhook rm ID` (see `podium webhook ls`)", store.MaxWebhooks))
	case errors.Is(err, store.ErrWebhookExists):
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
			"name: a webhook called %s exists; pick another name or remove it with `podium webhook rm`", w.Name))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store the webhook: %w (try again)", err))
	}
	s.log.Info("webhook added", "webhook", out.ID, "name", out.Name, "url", out.URL, "events", out.Events, "by", who)
	return connect.NewResponse(&podiumv1.WebhookServiceAddResponse{Webhook: toProto(out), Secret: shown}), nil
}

// List lists the webhooks with how their deliveries go.
func (s *Service) List(ctx context.Context, _ *connect.Request[podiumv1.WebhookServiceListRequest]) (*connect.Response[podiumv1.WebhookServiceListResponse], error) {
	ws, err := s.store.ListWebhooks(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("list webhooks: %w (try again)", err))
	}
	out := &podiumv1.WebhookServiceListResponse{}
	for _, w := range ws {
		out.Webhooks = append(out.Webhooks, toProto(w))
	}
	return connect.NewResponse(out), nil
}

// Remove removes a webhook with its pending events, and its signing secret
// when the coordinator generated it (it is on the webhook's row).
func (s *Service) Remove(ctx context.Context, req *connect.Request[podiumv1.WebhookServiceRemoveRequest]) (*connect.Response[podiumv1.WebhookServiceRemoveResponse], error) {
	id := req.Msg.GetId()
	if !ids.Valid("hook", id) {
		return nil, invalid("id: %q is not a webhook id (hook_…): `podium webhook ls` lists them", clip(id))
	}
	err := s.store.RemoveWebhook(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no webhook %s: `podium webhook ls` lists them", id))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("remove webhook %s: %w (try again)", id, err))
	}
	s.log.Info("webhook removed", "webhook", id)
	return connect.NewResponse(&podiumv1.WebhookServiceRemoveResponse{}), nil
}

// Test queues a webhook.test event for one webhook: signed and delivered
// like any other, so an admin sees at once whether the receiver answers and
// checks the signature (podium webhook ls, or the receiver's own log).
func (s *Service) Test(ctx context.Context, req *connect.Request[podiumv1.WebhookServiceTestRequest]) (*connect.Response[podiumv1.WebhookServiceTestResponse], error) {
	id := req.Msg.GetId()
	if !ids.Valid("hook", id) {
		return nil, invalid("id: %q is not a webhook id (hook_…): `podium webhook ls` lists them", clip(id))
	}
	evt, err := s.store.EnqueueWebhookTest(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no webhook %s: `podium webhook ls` lists them", id))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("queue a test event for webhook %s: %w (try again)", id, err))
	}
	s.log.Info("webhook test event queued", "webhook", id, "event", evt)
	return connect.NewResponse(&podiumv1.WebhookServiceTestResponse{EventId: evt}), nil
}

// Redeliver makes every event still waiting for one webhook due now: after
// a receiver is fixed, its backlog need not wait out the backoff.
func (s *Service) Redeliver(ctx context.Context, req *connect.Request[podiumv1.WebhookServiceRedeliverRequest]) (*connect.Response[podiumv1.WebhookServiceRedeliverResponse], error) {
	id := req.Msg.GetId()
	if !ids.Valid("hook", id) {
		return nil, invalid("id: %q is not a webhook id (hook_…): `podium webhook ls` lists them", clip(id))
	}
	n, err := s.store.RetryWebhookNow(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no webhook %s: `podium webhook ls` lists them", id))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("redeliver webhook %s: %w (try again)", id, err))
	}
	s.log.Info("webhook events made due now", "webhook", id, "events", n)
	return connect.NewResponse(&podiumv1.WebhookServiceRedeliverResponse{Retried: n}), nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func toProto(w store.Webhook) *podiumv1.Webhook {
	p := &podiumv1.Webhook{Id: w.ID, Name: w.Name, Url: w.URL, Events: w.Events, SecretName: w.SecretName,
		CreatedBy: w.CreatedBy, CreatedAt: timestamppb.New(w.CreatedAt), Pending: w.Pending,
		LastStatus: w.LastStatus, LastError: w.LastError}
	if w.LastAttemptAt != nil {
		p.LastAttemptAt = timestamppb.New(*w.LastAttemptAt)
	}
	return p
}
