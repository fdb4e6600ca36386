package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SecretRow is a stored secret: its sealed value and who set it when. The
// store never sees a value in the clear; package coordinator/secrets seals
// and opens.
type SecretRow struct {
	Name              string
	Ciphertext, Nonce []byte
	KeyID             string
	SetBy             string
	SetAt             time.Time
	// Allow are the principals granted its use besides admins: read by
	// ListSecrets, and added to its grants by PutSecret.
	Allow []string
	// Version counts the values the secret has had: 1 for the first, one
	// more each time it is set (podium.secrets.version). A task attempt
	// pins the version it was assigned (secret_pins).
	Version int32
}

// PutSecret stores a secret as its next version, replacing the current
// value, and grants it to r.Allow (added to the grants it has) in the same
// transaction. It reports whether the name was new. The value it replaces is
// kept (podium.secret_versions) when an attempt pins it, so that the node
// holding that attempt can be sent it again after a restart; the retention
// job deletes it once no attempt pins it. The call's audit row commits with
// it.
func (s *Store) PutSecret(ctx context.Context, r SecretRow) (created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// Insert, or lock the row and replace it. A delete committed
		// between the two finds no row to lock: then the name is new again,
		// so go round (a set must never report success and store nothing).
		for range 3 {
			// A new name starts past any version kept of a deleted secret of
			// the same name, so that a pin never names two values.
			tag, err := tx.Exec(ctx, `insert into podium.secrets (name, ciphertext, nonce, key_id, set_by, version)
				values ($1, $2, $3, $4, $5,
					coalesce((select max(version) from podium.secret_versions where name = $1), 0) + 1)
				on conflict (name) do nothing`, r.Name, r.Ciphertext, r.Nonce, r.KeyID, r.SetBy)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				created = true
				return grantSecret(ctx, tx, r.Name, r.Allow, r.SetBy)
			}
			// The row lock first: an assignment pinning the current version
			// holds it shared (PinSecrets), so its pin is committed, and seen
			// below, before the value it pins is replaced.
			locked, err := tx.Exec(ctx, "select 1 from podium.secrets where name = $1 for update", r.Name)
			if err != nil {
				return err
			}
			if locked.RowsAffected() == 0 {
				continue // deleted meanwhile
			}
			if err := keepPinned(ctx, tx, r.Name); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `update podium.secrets set ciphertext = $2, nonce = $3, key_id = $4, set_by = $5,
				set_at = now(), version = version + 1 where name = $1`, r.Name, r.Ciphertext, r.Nonce, r.KeyID, r.SetBy); err != nil {
				return err
			}
			return grantSecret(ctx, tx, r.Name, r.Allow, r.SetBy)
		}
		return fmt.Errorf("secret %s was deleted and set again by others while this set ran; set it again", r.Name)
	})
	return created, err
}

// keepPinned copies the current value of the secret name into
// podium.secret_versions if an attempt pins it; the caller holds the row's
// lock and is about to replace or delete it.
func keepPinned(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `insert into podium.secret_versions (name, version, ciphertext, nonce, key_id, set_by, set_at)
		select s.name, s.version, s.ciphertext, s.nonce, s.key_id, s.set_by, s.set_at from podium.secrets s
		where s.name = $1 and exists (select 1 from podium.secret_pins p where p.name = s.name and p.version = s.version)
		on conflict (name, version) do nothing`, name)
	return err
}

// ListSecrets lists every secret by name with its version and grants,
// without its sealed value.
func (s *Store) ListSecrets(ctx context.Context) ([]SecretRow, error) {
	rows, err := s.pool.Query(ctx, "select name, key_id, set_by, set_at, version, "+allowColumn+" from podium.secrets s order by name")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (SecretRow, error) {
		var r SecretRow
		err := row.Scan(&r.Name, &r.KeyID, &r.SetBy, &r.SetAt, &r.Version, &r.Allow)
		return r, err
	})
}

// DeleteSecret removes a secret and its grants; ErrNotFound when there is
// none of that name. Tasks already assigned keep the value they were sent,
// and the version they pin is kept until they end (their node may need it
// again to redact); tasks still queued that name it fail to start (their
// assignment cannot be built). The call's audit row commits with it.
func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select 1 from podium.secrets where name = $1 for update", name); err != nil {
			return err
		}
		if err := keepPinned(ctx, tx, name); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "delete from podium.secrets where name = $1", name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// SealedSecrets reads the sealed values of the named secrets, keyed by name;
// names with no secret are absent from the map.
func (s *Store) SealedSecrets(ctx context.Context, names []string) (map[string]SecretRow, error) {
	out := make(map[string]SecretRow, len(names))
	if len(names) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `select name, ciphertext, nonce, key_id, set_by, set_at, version
		from podium.secrets where name = any($1)`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r SecretRow
		if err := rows.Scan(&r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetBy, &r.SetAt, &r.Version); err != nil {
			return nil, err
		}
		out[r.Name] = r
	}
	return out, rows.Err()
}

// MissingSecrets returns those of names that no stored secret has, in the
// order given.
func (s *Store) MissingSecrets(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `select n from unnest($1::text[]) with ordinality as u(n, i)
		where not exists (select 1 from podium.secrets s where s.name = u.n) order by i`, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SecretKeyIDs counts the stored secrets (every version kept), registry
// logins and webhook signing secrets by the key they were sealed under, so a
// coordinator can refuse to start without the key they need.
func (s *Store) SecretKeyIDs(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `select key_id, count(*) from (
		select key_id from podium.secrets union all select key_id from podium.secret_versions
		union all select key_id from podium.registries
		union all select signing_key_id from podium.webhooks where signing_key_id is not null) k group by key_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// RotateSecrets rewrites every stored secret, every kept version of one,
// every registry password, every webhook signing secret and the apt signing
// key in one transaction: reseal gets each row (locked) and returns its new
// sealed value. Each reaches reseal as a SecretRow named by the associated
// data it is sealed under: a secret (any version) by its name, a registry
// login as RegistryAAD(host), a webhook's secret as WebhookKeyAAD(id) (or
// its former secret name, until it is re-sealed at start), the apt key as
// AptKeyAAD (or LegacyAptKeyAAD). Either every row is resealed or, when
// reseal or a write fails, none is: a version left under the old key would
// fail the adoption of the task pinning it. It returns how many were
// resealed.
func (s *Store) RotateSecrets(ctx context.Context, reseal func(SecretRow) (SecretRow, error)) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Current values and kept versions alike, each written back to its
		// own table.
		for _, table := range []string{"podium.secrets", "podium.secret_versions"} {
			rows, err := tx.Query(ctx, `select name, ciphertext, nonce, key_id, set_by, set_at, version
				from `+table+` order by name, version for update`)
			if err != nil {
				return err
			}
			all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SecretRow, error) {
				var r SecretRow
				err := row.Scan(&r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetBy, &r.SetAt, &r.Version)
				return r, err
			})
			if err != nil {
				return err
			}
			for _, r := range all {
				nr, err := reseal(r)
				if err != nil {
					return err
				}
				if nr.Name != r.Name {
					return errors.New("store: reseal renamed a secret")
				}
				// set_by and set_at stay: rotation changes the key, not the value.
				if _, err := tx.Exec(ctx, "update "+table+" set ciphertext = $3, nonce = $4, key_id = $5 where name = $1 and version = $2",
					r.Name, r.Version, nr.Ciphertext, nr.Nonce, nr.KeyID); err != nil {
					return fmt.Errorf("secret %s version %d: %w", r.Name, r.Version, err)
				}
				n++
			}
		}
		rows, err := tx.Query(ctx, `select host, username, ciphertext, nonce, key_id, set_by, set_at
			from podium.registries order by host for update`)
		if err != nil {
			return err
		}
		regs, err := pgx.CollectRows(rows, scanRegistry)
		if err != nil {
			return err
		}
		for _, r := range regs {
			name := RegistryAAD(r.Host)
			nr, err := reseal(SecretRow{Name: name, Ciphertext: r.Ciphertext, Nonce: r.Nonce, KeyID: r.KeyID, SetBy: r.SetBy, SetAt: r.SetAt})
			if err != nil {
				return err
			}
			if nr.Name != name {
				return errors.New("store: reseal renamed a registry login")
			}
			if _, err := tx.Exec(ctx, "update podium.registries set ciphertext = $2, nonce = $3, key_id = $4 where host = $1",
				r.Host, nr.Ciphertext, nr.Nonce, nr.KeyID); err != nil {
				return fmt.Errorf("registry %s: %w", r.Host, err)
			}
			n++
		}
		hooks, err := resealWebhookKeys(ctx, tx, reseal)
		if err != nil {
			return err
		}
		n += hooks
		// The apt repository's signing key, when the coordinator made it
		// (coordinator/aptrepo), is sealed under the same key.
		if ok, err := resealAptKey(ctx, tx, reseal); err != nil {
			return fmt.Errorf("apt signing key: %w", err)
		} else if ok {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// FailAssignment fails a scheduled task whose assignment cannot be built
// (a secret it names was deleted after it was submitted), in one
// transaction: the task ends failed with reason, its attempt is finished,
// and its log says so, as a revoked assignment's would. It reports whether
// the task was still scheduled on that attempt (else nothing is changed).
func (s *Store) FailAssignment(ctx context.Context, taskID string, attempt int32, reason string) (bool, error) {
	var moved bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		moved, err = transitionTask(ctx, tx, Transition{TaskID: taskID, From: []string{Scheduled}, To: Failed, Attempt: attempt, Reason: &reason})
		if err != nil || !moved {
			return err
		}
		if _, err := tx.Exec(ctx, "update podium.attempts set finished_at = now() where task_id = $1 and attempt = $2", taskID, attempt); err != nil {
			return err
		}
		return appendStatus(ctx, tx, taskID, attempt, Failed, reason, nil, 0)
	})
	return moved, err
}
