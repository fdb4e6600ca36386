package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxWebhooks bounds podium.webhooks: every task that ends is checked
// against them all in its own transaction (the outbox trigger), so the list
// stays short.
const MaxWebhooks = 100

// ErrTooManyWebhooks means MaxWebhooks are registered already.
var ErrTooManyWebhooks = fmt.Errorf("store: %d webhooks are registered already", MaxWebhooks)

// ErrWebhookExists means a webhook of that name is registered already.
var ErrWebhookExists = errors.New("store: a webhook of that name exists")

// Webhook is a row of podium.webhooks with its pending count.
type Webhook struct {
	ID, Name, URL   string
	Events          []string
	SecretName      string
	GeneratedSecret bool
	CreatedBy       string
	CreatedAt       time.Time
	LastStatus      string
	LastError       string
	LastAttemptAt   *time.Time
	// Pending is how many outbox rows wait for this webhook (ListWebhooks).
	Pending int64
}

const webhookColumns = `id, name, url, events, secret_name, generated_secret, created_by, created_at,
	last_status, last_error, last_attempt_at`

func scanWebhook(r pgx.Row, extra ...any) (Webhook, error) {
	var w Webhook
	err := r.Scan(append([]any{&w.ID, &w.Name, &w.URL, &w.Events, &w.SecretName, &w.GeneratedSecret, &w.CreatedBy,
		&w.CreatedAt, &w.LastStatus, &w.LastError, &w.LastAttemptAt}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, ErrNotFound
	}
	return w, err
}

// WebhookKeyAAD is the associated data a webhook's generated signing secret
// is sealed under, and the name it reaches RotateSecrets's reseal under. It
// holds ':', which no secret name can, so the signing secret is no secret a
// task could name (--secret, notify[].secret), and no secret's ciphertext
// opens as it.
func WebhookKeyAAD(id string) string { return "podium:webhook:" + id }

// legacyWebhookAAD is the secret name a generated signing secret was stored
// under before it moved onto its webhook's row (migration 0033), and so the
// associated data it opens under until it is re-sealed (ResealLegacy).
func legacyWebhookAAD(id string) string {
	return "webhook-" + strings.ToLower(strings.TrimPrefix(id, "hook_"))
}

// AddWebhook stores w (already valid) and, when secret is not nil, the
// signing secret the coordinator generated for it, sealed under
// WebhookKeyAAD(w.ID), on the webhook's own row (never among the secrets
// tasks name), in one transaction with the call's audit row. It refuses a MaxWebhooks+1st webhook
// (ErrTooManyWebhooks) and a name taken already (ErrWebhookExists).
func (s *Store) AddWebhook(ctx context.Context, w Webhook, secret *SecretRow) (Webhook, error) {
	var out Webhook
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The count and the insert under one lock, so two admins adding at
		// once cannot both pass the bound. Adding webhooks is rare; the
		// triggers only read the table, and this mode lets them.
		if _, err := tx.Exec(ctx, "lock table podium.webhooks in share row exclusive mode"); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, "select count(*) from podium.webhooks").Scan(&n); err != nil {
			return err
		}
		if n >= MaxWebhooks {
			return ErrTooManyWebhooks
		}
		var sealed SecretRow
		if secret != nil {
			sealed = *secret
		}
		var err error
		out, err = scanWebhook(tx.QueryRow(ctx, `insert into podium.webhooks
			(id, name, url, events, secret_name, generated_secret, created_by, signing_ciphertext, signing_nonce, signing_key_id)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, '')) returning `+webhookColumns,
			w.ID, w.Name, w.URL, w.Events, w.SecretName, secret != nil, w.CreatedBy,
			sealed.Ciphertext, sealed.Nonce, sealed.KeyID))
		return err
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "webhooks_name" {
		return out, ErrWebhookExists
	}
	return out, err
}

// ListWebhooks lists every webhook by creation, each with how many of its
// events wait in the outbox.
func (s *Store) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	rows, err := s.pool.Query(ctx, "select "+webhookColumns+`,
		(select count(*) from podium.webhook_outbox o where o.webhook_id = w.id)
		from podium.webhooks w order by created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		var n int64
		w, err := scanWebhook(rows, &n)
		if err != nil {
			return nil, err
		}
		w.Pending = n
		out = append(out, w)
	}
	return out, rows.Err()
}

// RemoveWebhook removes a webhook with its pending events and its generated
// signing secret (on its row), in one transaction with the call's audit
// row. ErrNotFound if there is none with that id.
func (s *Store) RemoveWebhook(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "delete from podium.webhooks where id = $1", id)
		if err == nil && tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return err
	})
}

// WebhookSigningKey reads the generated signing secret of webhook id, sealed,
// with Name the associated data it opens under; ErrNotFound when the webhook
// is gone or signs with a stored secret it names instead (secret_name).
func (s *Store) WebhookSigningKey(ctx context.Context, id string) (SecretRow, error) {
	var r SecretRow
	var legacy bool
	err := s.pool.QueryRow(ctx, `select signing_ciphertext, signing_nonce, signing_key_id, signing_legacy
		from podium.webhooks where id = $1 and signing_ciphertext is not null`, id).Scan(&r.Ciphertext, &r.Nonce, &r.KeyID, &legacy)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	r.Name = WebhookKeyAAD(id)
	if legacy {
		r.Name = legacyWebhookAAD(id)
	}
	return r, err
}

// resealWebhookKeys reseals every webhook's generated signing secret in the
// rotation's transaction tx, and says how many.
func resealWebhookKeys(ctx context.Context, tx pgx.Tx, reseal func(SecretRow) (SecretRow, error)) (int, error) {
	rows, err := tx.Query(ctx, `select id, signing_ciphertext, signing_nonce, signing_key_id, signing_legacy
		from podium.webhooks where signing_ciphertext is not null order by id for update`)
	if err != nil {
		return 0, err
	}
	type hook struct {
		id string
		r  SecretRow
	}
	hooks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hook, error) {
		var h hook
		var legacy bool
		err := row.Scan(&h.id, &h.r.Ciphertext, &h.r.Nonce, &h.r.KeyID, &legacy)
		h.r.Name = WebhookKeyAAD(h.id)
		if legacy {
			h.r.Name = legacyWebhookAAD(h.id)
		}
		return h, err
	})
	if err != nil {
		return 0, err
	}
	for _, h := range hooks {
		nr, err := reseal(h.r)
		if err != nil {
			return 0, err
		}
		if nr.Name != h.r.Name {
			return 0, errors.New("store: reseal renamed a webhook's signing secret")
		}
		if _, err := tx.Exec(ctx, `update podium.webhooks set signing_ciphertext = $2, signing_nonce = $3, signing_key_id = $4
			where id = $1`, h.id, nr.Ciphertext, nr.Nonce, nr.KeyID); err != nil {
			return 0, fmt.Errorf("webhook %s: %w", h.id, err)
		}
	}
	return len(hooks), nil
}

// OutboxRow is one event on its way to one destination.
type OutboxRow struct {
	ID         int64
	EventID    string
	EventType  string
	WebhookID  *string
	URL        string
	SecretName string
	// PerTask is a task's own notify: target, which the delivery dialer
	// holds to public addresses.
	PerTask bool
	// Body is the event exactly as it is posted, the same on every attempt.
	Body      []byte
	CreatedAt time.Time
	// Attempts counts this one: ClaimOutbox adds it when it claims the row.
	Attempts int
}

// ClaimOutbox claims up to limit rows that are due, oldest due first: it
// counts the attempt and moves each row's next attempt lease ahead, so no
// other replica takes it while this one posts, and any replica does once
// the lease has passed if this one never reports (it died mid-POST). Rows
// another replica is claiming at the same moment are skipped, not waited
// for.
func (s *Store) ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]OutboxRow, error) {
	rows, err := s.pool.Query(ctx, `with due as (
			select id from podium.webhook_outbox where next_attempt_at <= now()
			order by next_attempt_at limit $1 for update skip locked)
		update podium.webhook_outbox o
		set next_attempt_at = now() + make_interval(secs => $2), attempts = o.attempts + 1
		from due where o.id = due.id
		returning o.id, o.event_id, o.event_type, o.webhook_id, o.url, o.secret_name, o.per_task,
			o.payload::text, o.created_at, o.attempts`, limit, lease.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		var body string
		err := r.Scan(&o.ID, &o.EventID, &o.EventType, &o.WebhookID, &o.URL, &o.SecretName, &o.PerTask,
			&body, &o.CreatedAt, &o.Attempts)
		o.Body = []byte(body)
		return o, err
	})
}

// HookDelivery is how one claimed attempt went.
type HookDelivery struct {
	Row OutboxRow
	// Status is "delivered", "failed" (Next is the next attempt) or
	// "abandoned" (the row is dropped).
	Status string
	// Error says why an attempt failed; "" when delivered.
	Error string
	Next  time.Time
}

// Outbox delivery statuses (HookDelivery.Status, Webhook.LastStatus).
const (
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryAbandoned = "abandoned"
)

// maxDeliveryError bounds the error kept in a row: it quotes what a
// receiver answered.
const maxDeliveryError = 512

// RecordDelivery stores an attempt's outcome: a delivered or abandoned row
// is deleted, a failed one waits until d.Next; the webhook, if any,
// remembers it for `podium webhook ls`. An attempt whose claim was taken
// over meanwhile (the row was claimed again, so its attempts moved on)
// changes nothing: the newer attempt reports for itself.
func (s *Store) RecordDelivery(ctx context.Context, d HookDelivery) error {
	msg := d.Error
	if len(msg) > maxDeliveryError {
		msg = msg[:maxDeliveryError]
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tag pgconn.CommandTag
		var err error
		if d.Status == DeliveryFailed {
			tag, err = tx.Exec(ctx, `update podium.webhook_outbox set next_attempt_at = $3, last_error = $4
				where id = $1 and attempts = $2`, d.Row.ID, d.Row.Attempts, d.Next, msg)
		} else {
			tag, err = tx.Exec(ctx, "delete from podium.webhook_outbox where id = $1 and attempts = $2", d.Row.ID, d.Row.Attempts)
		}
		if err != nil || tag.RowsAffected() == 0 || d.Row.WebhookID == nil {
			return err
		}
		_, err = tx.Exec(ctx, `update podium.webhooks set last_status = $2, last_error = $3, last_attempt_at = now()
			where id = $1`, *d.Row.WebhookID, d.Status, msg)
		return err
	})
}

// EventWebhookTest is the type of the event `podium webhook test` sends.
const EventWebhookTest = "webhook.test"

// EnqueueWebhookTest queues a webhook.test event for one webhook, shaped
// like every other event (schema, id, type, created_at) and naming the
// webhook, and returns its id; ErrNotFound when there is no such webhook.
func (s *Store) EnqueueWebhookTest(ctx context.Context, id string) (string, error) {
	var evt string
	err := s.pool.QueryRow(ctx, `with ev as (select 'evt_' || replace(gen_random_uuid()::text, '-', '') as id)
		insert into podium.webhook_outbox (event_id, event_type, webhook_id, url, secret_name, per_task, payload)
		select ev.id, $2, w.id, w.url, w.secret_name, false,
			jsonb_build_object('schema', 'podium.event.v1', 'id', ev.id, 'type', $2::text,
				'created_at', podium.webhook_time(now()), 'webhook', jsonb_build_object('id', w.id, 'name', w.name))
		from podium.webhooks w, ev where w.id = $1
		returning event_id`, id, EventWebhookTest).Scan(&evt)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return evt, err
}

// RetryWebhookNow makes every event waiting for one webhook due now, and
// says how many; ErrNotFound when there is no such webhook. A row a replica
// is posting at this moment may be posted again by another: delivery is at
// least once, and receivers drop a repeat by its event id.
func (s *Store) RetryWebhookNow(ctx context.Context, id string) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "select exists (select 1 from podium.webhooks where id = $1)", id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		tag, err := tx.Exec(ctx, `update podium.webhook_outbox set next_attempt_at = now()
			where webhook_id = $1 and next_attempt_at > now()`, id)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// OutboxEntry is a row of the outbox as tests and operators look at it.
type OutboxEntry struct {
	EventID, EventType, URL string
	WebhookID               *string
	Attempts                int
	LastError               string
}

// ListOutbox lists what waits in the outbox, oldest first, at most limit.
func (s *Store) ListOutbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	rows, err := s.pool.Query(ctx, `select event_id, event_type, url, webhook_id, attempts, last_error
		from podium.webhook_outbox order by id limit $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[OutboxEntry])
}
