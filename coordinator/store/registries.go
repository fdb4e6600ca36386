package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// RegistryAAD is the associated data a registry's password is sealed under:
// "registry:" and the host. A secret's name (DNS-style) never holds ':', so
// a registry's ciphertext never opens as a secret's, nor one host's as
// another's. RotateSecrets hands registry rows to its reseal func under this
// name.
func RegistryAAD(host string) string { return "registry:" + host }

// RegistryRow is a stored registry login: its sealed password and who set it
// when. The store never sees the password in the clear.
type RegistryRow struct {
	Host, Username    string
	Ciphertext, Nonce []byte
	KeyID             string
	SetBy             string
	SetAt             time.Time
}

// PutRegistry stores a registry login, replacing one for the same host. It
// reports whether the host was new. The call's audit row commits with it.
func (s *Store) PutRegistry(ctx context.Context, r RegistryRow) (created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `insert into podium.registries (host, username, ciphertext, nonce, key_id, set_by)
		values ($1, $2, $3, $4, $5, $6)
		on conflict (host) do update set username = excluded.username, ciphertext = excluded.ciphertext,
			nonce = excluded.nonce, key_id = excluded.key_id, set_by = excluded.set_by, set_at = now()
		returning xmax = 0`, r.Host, r.Username, r.Ciphertext, r.Nonce, r.KeyID, r.SetBy).Scan(&created)
	})
	return created, err
}

// ListRegistries lists every registry login by host, without its sealed
// password.
func (s *Store) ListRegistries(ctx context.Context) ([]RegistryRow, error) {
	rows, err := s.pool.Query(ctx, "select host, username, key_id, set_by, set_at from podium.registries order by host")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RegistryRow, error) {
		var r RegistryRow
		err := row.Scan(&r.Host, &r.Username, &r.KeyID, &r.SetBy, &r.SetAt)
		return r, err
	})
}

// DeleteRegistry forgets the login for host; ErrNotFound when there is none.
// The call's audit row commits with it.
func (s *Store) DeleteRegistry(ctx context.Context, host string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "delete from podium.registries where host = $1", host)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// SealedRegistries reads the sealed logins of the given hosts, in host order;
// hosts with no login are left out.
func (s *Store) SealedRegistries(ctx context.Context, hosts []string) ([]RegistryRow, error) {
	if len(hosts) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `select host, username, ciphertext, nonce, key_id, set_by, set_at
		from podium.registries where host = any($1) order by host`, hosts)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRegistry)
}

func scanRegistry(row pgx.CollectableRow) (RegistryRow, error) {
	var r RegistryRow
	err := row.Scan(&r.Host, &r.Username, &r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetBy, &r.SetAt)
	return r, err
}
