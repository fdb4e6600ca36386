package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PinSecrets pins, for one attempt of a task, the version current now of
// each of the named secrets that the attempt has not pinned yet, and returns
// the sealed value of the version the attempt pins for each name, keyed by
// name; names that are not stored (and were never pinned) are absent. It
// runs when the attempt's assignment is built: the node gets exactly the
// pinned values, and the same ones again after it restarts (PinnedSecrets).
// A redelivery of the same attempt keeps the pins its first delivery made.
//
// The current rows are read under a shared lock, so a `secret set` or
// `secret rm` of the same name waits for the pin to commit and then keeps the
// value it replaces (keepPinned); the pin never names a value that is gone.
func (s *Store) PinSecrets(ctx context.Context, taskID string, attempt int32, names []string) (map[string]SecretRow, error) {
	if len(names) == 0 {
		return map[string]SecretRow{}, nil
	}
	var out map[string]SecretRow
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into podium.secret_pins (task_id, attempt, name, version)
			select $1, $2, s.name, s.version from podium.secrets s where s.name = any($3)
			order by s.name for share of s
			on conflict (task_id, attempt, name) do nothing`, taskID, attempt, names); err != nil {
			return err
		}
		var err error
		out, err = pinnedRows(ctx, tx, taskID, attempt, names)
		return err
	})
	return out, err
}

// PinnedSecrets returns the sealed value of the version the attempt pins of
// each of the named secrets, keyed by name, for the adoption of the attempt
// by its node after a restart. A name the attempt pins no version of (it was
// assigned by a coordinator older than pins) is read at its current value,
// the best there is; a name neither pinned nor stored is absent.
func (s *Store) PinnedSecrets(ctx context.Context, taskID string, attempt int32, names []string) (map[string]SecretRow, error) {
	out := map[string]SecretRow{}
	if len(names) == 0 {
		return out, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if out, err = pinnedRows(ctx, tx, taskID, attempt, names); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `select s.name, s.ciphertext, s.nonce, s.key_id, s.set_by, s.set_at, s.version
			from podium.secrets s where s.name = any($3)
			and not exists (select 1 from podium.secret_pins p where p.task_id = $1 and p.attempt = $2 and p.name = s.name)`,
			taskID, attempt, names)
		if err != nil {
			return err
		}
		return collectSecretRows(rows, out)
	})
	return out, err
}

// pinnedRows reads the pinned version of each named secret: the current row
// when it is still current, else the kept one.
func pinnedRows(ctx context.Context, tx pgx.Tx, taskID string, attempt int32, names []string) (map[string]SecretRow, error) {
	rows, err := tx.Query(ctx, `select p.name, coalesce(s.ciphertext, v.ciphertext), coalesce(s.nonce, v.nonce),
			coalesce(s.key_id, v.key_id), coalesce(s.set_by, v.set_by), coalesce(s.set_at, v.set_at), p.version
		from podium.secret_pins p
		left join podium.secrets s on s.name = p.name and s.version = p.version
		left join podium.secret_versions v on v.name = p.name and v.version = p.version
		where p.task_id = $1 and p.attempt = $2 and p.name = any($3)
			and (s.name is not null or v.name is not null)`, taskID, attempt, names)
	if err != nil {
		return nil, err
	}
	out := map[string]SecretRow{}
	return out, collectSecretRows(rows, out)
}

func collectSecretRows(rows pgx.Rows, into map[string]SecretRow) error {
	defer rows.Close()
	for rows.Next() {
		var r SecretRow
		if err := rows.Scan(&r.Name, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetBy, &r.SetAt, &r.Version); err != nil {
			return err
		}
		into[r.Name] = r
	}
	return rows.Err()
}

// SecretPin is one attempt's pinned version of one secret.
type SecretPin struct {
	TaskID  string
	Attempt int32
	Name    string
	Version int32
}

// SecretPins lists the pins of a task's attempts, for tests and operators.
func (s *Store) SecretPins(ctx context.Context, taskID string) ([]SecretPin, error) {
	rows, err := s.pool.Query(ctx, `select task_id, attempt, name, version from podium.secret_pins
		where task_id = $1 order by attempt, name`, taskID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[SecretPin])
}

// SecretVersions lists the versions of the secret name whose values are
// kept: the current one (if the secret exists) and every older one an
// attempt pinned when it was replaced and the retention job has not
// deleted yet, oldest first.
func (s *Store) SecretVersions(ctx context.Context, name string) ([]int32, error) {
	rows, err := s.pool.Query(ctx, `select version from podium.secret_versions where name = $1
		union select version from podium.secrets where name = $1 order by 1`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// releaseSecretPinsSQL deletes the pins of attempts that have ended: their
// task is terminal or has moved on to a later attempt, or the attempt is
// finished. Nothing will be adopted on their behalf again (a node reporting
// such an attempt is told to cancel it, and is sent no secret).
const releaseSecretPinsSQL = `with gone as (
	delete from podium.secret_pins p using (
		select p.task_id, p.attempt, p.name from podium.secret_pins p
		join podium.tasks t on t.id = p.task_id
		join podium.attempts a on a.task_id = p.task_id and a.attempt = p.attempt
		where t.state in ` + terminalSQL + ` or t.attempt <> p.attempt or a.finished_at is not null
		limit $1
		for update of p skip locked) due
	where p.task_id = due.task_id and p.attempt = due.attempt and p.name = due.name
	returning 1)
	select count(*) from gone`

// ReleaseSecretPins deletes up to limit pins of attempts that have ended, and
// says how many. It is the retention job's (leader only, small batches).
func (s *Store) ReleaseSecretPins(ctx context.Context, _ time.Duration, limit int) (int, error) {
	return s.countOne(ctx, releaseSecretPinsSQL, limit)
}

// trimSecretVersionsSQL deletes kept versions that no attempt pins. No new
// pin can name one: pins are only ever made of a current version
// (PinSecrets), and a kept version is never current again (a secret set
// after it was deleted starts past it).
const trimSecretVersionsSQL = `with gone as (
	delete from podium.secret_versions v using (
		select v.name, v.version from podium.secret_versions v
		where not exists (select 1 from podium.secret_pins p where p.name = v.name and p.version = v.version)
		limit $1
		for update of v skip locked) due
	where v.name = due.name and v.version = due.version
	returning 1)
	select count(*) from gone`

// TrimSecretVersions deletes up to limit old secret values that no attempt
// pins any more, and says how many. It is the retention job's.
func (s *Store) TrimSecretVersions(ctx context.Context, _ time.Duration, limit int) (int, error) {
	return s.countOne(ctx, trimSecretVersionsSQL, limit)
}
