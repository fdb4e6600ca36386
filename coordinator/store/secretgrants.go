package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Who may use a secret (podium.secret_grants, migration 0032): admins
// always, and the principals granted it. A principal is a user's name,
// "group:NAME" or "role:member"; package coordinator/secrets validates them
// and decides what a principal reaches. The store keeps the rows.

// MaxSecretGrants bounds the principals one secret is granted to: a grant
// names people and teams, and a secret everyone should use is granted to
// role:member rather than to each.
const MaxSecretGrants = 256

// ErrTooManyGrants means a grant would take a secret past MaxSecretGrants.
var ErrTooManyGrants = fmt.Errorf("a secret may be granted to at most %d principals: grant a group (group:NAME) or role:member instead of each person", MaxSecretGrants)

// NotGrantedError means a revoke named principals the secret is not granted
// to; nothing was revoked. Allow is what the secret is granted to.
type NotGrantedError struct {
	Secret     string
	Principals []string
	Allow      []string
}

func (e *NotGrantedError) Error() string {
	has := "it is granted to nobody (admins alone use it)"
	if len(e.Allow) > 0 {
		has = "it is granted to " + strings.Join(e.Allow, ", ")
	}
	return fmt.Sprintf("secret %s is not granted to %s, so nothing was revoked: %s", e.Secret, strings.Join(e.Principals, ", "), has)
}

// grantSecret adds principals to name's grants in tx (those it has keep
// their granted_by and granted_at), refusing more than MaxSecretGrants in
// all. The secret's row must exist (the foreign key says so otherwise).
func grantSecret(ctx context.Context, tx pgx.Tx, name string, principals []string, by string) error {
	if len(principals) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `insert into podium.secret_grants (secret, principal, granted_by)
		select $1, p, $3 from unnest($2::text[]) as p on conflict do nothing`, name, principals, by); err != nil {
		return err
	}
	var n int
	if err := tx.QueryRow(ctx, "select count(*) from podium.secret_grants where secret = $1", name).Scan(&n); err != nil {
		return err
	}
	if n > MaxSecretGrants {
		return ErrTooManyGrants
	}
	return nil
}

// secretWithGrants reads a secret (without its sealed value) and its
// grants in tx, locking the row; ErrNotFound when there is none.
func secretWithGrants(ctx context.Context, tx pgx.Tx, name string) (SecretRow, error) {
	var r SecretRow
	err := tx.QueryRow(ctx, `select name, key_id, set_by, set_at, version, `+allowColumn+`
		from podium.secrets s where name = $1 for update`, name).Scan(&r.Name, &r.KeyID, &r.SetBy, &r.SetAt, &r.Version, &r.Allow)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	return r, err
}

// allowColumn is a secret's grants, sorted, as a column of a query over
// podium.secrets s.
const allowColumn = `coalesce((select array_agg(g.principal order by g.principal)
	from podium.secret_grants g where g.secret = s.name), '{}')`

// GrantSecret grants the secret name to principals (already validated),
// by an admin; granting one it has is no change. It returns the secret with
// all its grants; ErrNotFound when there is no such secret, ErrTooManyGrants
// past the bound. The call's audit row commits with it.
func (s *Store) GrantSecret(ctx context.Context, name string, principals []string, by string) (SecretRow, error) {
	var r SecretRow
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := secretWithGrants(ctx, tx, name); err != nil {
			return err
		}
		if err := grantSecret(ctx, tx, name, principals, by); err != nil {
			return err
		}
		var err error
		r, err = secretWithGrants(ctx, tx, name)
		return err
	})
	return r, err
}

// RevokeSecret takes principals off the secret's grants. Every one of them
// must be granted now, else nothing changes and the error is a
// *NotGrantedError saying what the secret is granted to (a misspelt
// principal must not look revoked). ErrNotFound when there is no such
// secret. The call's audit row commits with it.
func (s *Store) RevokeSecret(ctx context.Context, name string, principals []string) (SecretRow, error) {
	var r SecretRow
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := secretWithGrants(ctx, tx, name)
		if err != nil {
			return err
		}
		var absent []string
		for _, p := range principals {
			if !slices.Contains(cur.Allow, p) {
				absent = append(absent, p)
			}
		}
		if len(absent) > 0 {
			return &NotGrantedError{Secret: name, Principals: absent, Allow: cur.Allow}
		}
		if _, err := tx.Exec(ctx, "delete from podium.secret_grants where secret = $1 and principal = any($2)", name, principals); err != nil {
			return err
		}
		r, err = secretWithGrants(ctx, tx, name)
		return err
	})
	return r, err
}

// GrantedSecrets returns which of names (every stored secret when names is
// nil) are granted to any of principals, sorted. It does not know admins:
// the caller decides whom a principal stands for.
func (s *Store) GrantedSecrets(ctx context.Context, principals, names []string) ([]string, error) {
	if len(principals) == 0 || (names != nil && len(names) == 0) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `select distinct secret from podium.secret_grants
		where principal = any($1) and ($2::text[] is null or secret = any($2)) order by secret`, principals, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// TaskOwner returns who a task belongs to (requested_by); ErrNotFound when
// there is no such task.
func (s *Store) TaskOwner(ctx context.Context, taskID string) (string, error) {
	var who string
	err := s.pool.QueryRow(ctx, "select requested_by from podium.tasks where id = $1", taskID).Scan(&who)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return who, err
}

// SecretUse is one audit row for a secret reached on someone's behalf by
// the coordinator itself, not by a call: a task's assignment carrying it
// (or refused it), a schedule tick refused for it.
type SecretUse struct {
	// Who is the task's (or schedule's) owner; Role the role the check
	// gave them.
	Who, Role string
	// Target names what used it and the secret: "task_… secret NAME".
	Target string
	// Result is "ok", or "permission_denied" for a use refused.
	Result string
}

// SecretUseAction is the audit log's action for a secret's use.
const SecretUseAction = "secret.use"

// SecretUseTransport is the audit log's transport for what the coordinator
// does on its own (no caller's connection).
const SecretUseTransport = "coordinator"

// AuditSecretUses writes uses to the audit log in one statement. The value
// is never in a row; the target names the task and the secret.
func (s *Store) AuditSecretUses(ctx context.Context, uses []SecretUse) error {
	if len(uses) == 0 {
		return nil
	}
	who, role, target, result := make([]string, len(uses)), make([]string, len(uses)), make([]string, len(uses)), make([]string, len(uses))
	for i, u := range uses {
		who[i], role[i], target[i], result[i] = u.Who, u.Role, u.Target, u.Result
	}
	_, err := s.pool.Exec(ctx, `insert into podium.audit_log (who, role, transport, action, target, result)
		select w, r, $5, $6, t, x from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as u(w, r, t, x)`,
		who, role, target, result, SecretUseTransport, SecretUseAction)
	return err
}

// RefuseTick handles one due tick of a schedule without creating its task,
// recording note as the tick's (why it created nothing) and moving the
// schedule to f.Next, as an overlap skip does. It reports whether it did:
// false when the tick was handled already, or the schedule is gone, paused
// or has moved on. f.Task is not used.
func (s *Store) RefuseTick(ctx context.Context, f Fire, note string) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		done = false
		var paused bool
		var next *time.Time
		err := tx.QueryRow(ctx, "select paused, next_run_at from podium.schedules where id = $1 for update", f.ScheduleID).Scan(&paused, &next)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if paused || next == nil || !next.Equal(f.Tick) {
			return nil
		}
		tag, err := tx.Exec(ctx, `insert into podium.schedule_ticks (schedule_id, tick, note) values ($1, $2, $3)
			on conflict do nothing`, f.ScheduleID, f.Tick, note)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		done = true
		return advance(ctx, tx, f.ScheduleID, Fire{Next: f.Next}, nil)
	})
	return done, err
}
