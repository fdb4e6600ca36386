package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// AptKeyRow is the stored apt repository signing key, sealed (package
// coordinator/aptrepo seals and opens it under the secrets key).
type AptKeyRow struct {
	Ciphertext, Nonce []byte
	KeyID             string
	Fingerprint       string
	CreatedAt         time.Time
}

// AptSigningKey reads the stored apt signing key; ErrNotFound when none was
// made yet.
func (s *Store) AptSigningKey(ctx context.Context) (AptKeyRow, error) {
	var r AptKeyRow
	err := s.pool.QueryRow(ctx, `select ciphertext, nonce, key_id, fingerprint, created_at
		from podium.apt_signing_key`).Scan(&r.Ciphertext, &r.Nonce, &r.KeyID, &r.Fingerprint, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return AptKeyRow{}, ErrNotFound
	}
	return r, err
}

// PutAptSigningKeyIfAbsent stores r as the apt signing key unless one is
// stored already, and returns the one stored after the call: r, or the key
// another replica stored first. Two replicas that start together and both
// generate a key thus both sign with the same one, the winner's.
func (s *Store) PutAptSigningKeyIfAbsent(ctx context.Context, r AptKeyRow) (AptKeyRow, error) {
	if _, err := s.pool.Exec(ctx, `insert into podium.apt_signing_key (ciphertext, nonce, key_id, fingerprint)
		values ($1, $2, $3, $4) on conflict (singleton) do nothing`, r.Ciphertext, r.Nonce, r.KeyID, r.Fingerprint); err != nil {
		return AptKeyRow{}, err
	}
	return s.AptSigningKey(ctx)
}

// AptKeyAAD is the associated data the apt signing key is sealed with, and
// the name it reaches RotateSecrets's reseal under.
const AptKeyAAD = "apt-signing-key"

// resealAptKey reseals the stored apt signing key, if any, in the rotation's
// transaction tx; it reports whether there was one.
func resealAptKey(ctx context.Context, tx pgx.Tx, reseal func(SecretRow) (SecretRow, error)) (bool, error) {
	var r SecretRow
	err := tx.QueryRow(ctx, `select ciphertext, nonce, key_id, created_at from podium.apt_signing_key for update`).
		Scan(&r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Name = AptKeyAAD
	nr, err := reseal(r)
	if err != nil {
		return false, err
	}
	if nr.Name != AptKeyAAD {
		return false, errors.New("store: reseal renamed the apt signing key")
	}
	_, err = tx.Exec(ctx, "update podium.apt_signing_key set ciphertext = $1, nonce = $2, key_id = $3",
		nr.Ciphertext, nr.Nonce, nr.KeyID)
	return err == nil, err
}
