package store

import (
	"context"
	"errors"
	"fmt"
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
	// AAD is the associated data it is sealed under: AptKeyAAD, or
	// LegacyAptKeyAAD for a key sealed before that (until a replica's start
	// re-seals it, ResealLegacy).
	AAD string
}

// AptSigningKey reads the stored apt signing key; ErrNotFound when none was
// made yet.
func (s *Store) AptSigningKey(ctx context.Context) (AptKeyRow, error) {
	var r AptKeyRow
	var legacy bool
	err := s.pool.QueryRow(ctx, `select ciphertext, nonce, key_id, fingerprint, created_at, legacy_aad
		from podium.apt_signing_key`).Scan(&r.Ciphertext, &r.Nonce, &r.KeyID, &r.Fingerprint, &r.CreatedAt, &legacy)
	if errors.Is(err, pgx.ErrNoRows) {
		return AptKeyRow{}, ErrNotFound
	}
	r.AAD = aptAAD(legacy)
	return r, err
}

// PutAptSigningKeyIfAbsent stores r as the apt signing key unless one is
// stored already, and returns the one stored after the call: r, or the key
// another replica stored first. Two replicas that start together and both
// generate a key thus both sign with the same one, the winner's. r must be
// sealed under AptKeyAAD.
func (s *Store) PutAptSigningKeyIfAbsent(ctx context.Context, r AptKeyRow) (AptKeyRow, error) {
	if _, err := s.pool.Exec(ctx, `insert into podium.apt_signing_key (ciphertext, nonce, key_id, fingerprint, legacy_aad)
		values ($1, $2, $3, $4, false) on conflict (singleton) do nothing`, r.Ciphertext, r.Nonce, r.KeyID, r.Fingerprint); err != nil {
		return AptKeyRow{}, err
	}
	return s.AptSigningKey(ctx)
}

// AptKeyAAD is the associated data the apt signing key is sealed with, and
// the name it reaches RotateSecrets's reseal under. A secret's name is a DNS
// label and never holds ':', so no secret's ciphertext opens as the apt key
// nor the apt key's as a secret.
const AptKeyAAD = "podium:apt-signing-key"

// LegacyAptKeyAAD is what the apt key was sealed with before AptKeyAAD. It
// is also a valid secret name: a key still sealed under it is re-sealed at
// start (ResealLegacy), and read under it until then.
const LegacyAptKeyAAD = "apt-signing-key"

func aptAAD(legacy bool) string {
	if legacy {
		return LegacyAptKeyAAD
	}
	return AptKeyAAD
}

// resealAptKey reseals the stored apt signing key, if any, in the rotation's
// transaction tx, under the associated data it has; it reports whether there
// was one.
func resealAptKey(ctx context.Context, tx pgx.Tx, reseal func(SecretRow) (SecretRow, error)) (bool, error) {
	var r SecretRow
	var legacy bool
	err := tx.QueryRow(ctx, `select ciphertext, nonce, key_id, created_at, legacy_aad from podium.apt_signing_key for update`).
		Scan(&r.Ciphertext, &r.Nonce, &r.KeyID, &r.SetAt, &legacy)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.Name = aptAAD(legacy)
	nr, err := reseal(r)
	if err != nil {
		return false, err
	}
	if nr.Name != r.Name {
		return false, errors.New("store: reseal renamed the apt signing key")
	}
	_, err = tx.Exec(ctx, "update podium.apt_signing_key set ciphertext = $1, nonce = $2, key_id = $3",
		nr.Ciphertext, nr.Nonce, nr.KeyID)
	return err == nil, err
}

// ResealLegacy moves the coordinator's own sealed keys that are still under
// associated data a secret's name could take onto their own: the apt signing
// key from LegacyAptKeyAAD to AptKeyAAD, and each webhook signing secret
// from its former secret name to WebhookKeyAAD(id). reseal gets the row as
// sealed (Name its old associated data) and the new associated data, and
// returns it sealed under that. Only rows sealed under keyID are touched:
// one under another key cannot be opened here (and the coordinator refuses
// to start, or the apt repository says so, already).
//
// It is run by every replica at start, in one transaction; the rows are
// locked and chosen by their legacy mark, so replicas starting together
// re-seal each row once (a second one finds it no longer marked). It
// returns how many it re-sealed.
func (s *Store) ResealLegacy(ctx context.Context, keyID string, reseal func(r SecretRow, aad string) (SecretRow, error)) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var r SecretRow
		err := tx.QueryRow(ctx, `select ciphertext, nonce, key_id from podium.apt_signing_key
			where legacy_aad and key_id = $1 for update`, keyID).Scan(&r.Ciphertext, &r.Nonce, &r.KeyID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			r.Name = LegacyAptKeyAAD
			nr, err := reseal(r, AptKeyAAD)
			if err != nil {
				return fmt.Errorf("apt signing key: %w", err)
			}
			if _, err := tx.Exec(ctx, `update podium.apt_signing_key set ciphertext = $1, nonce = $2, key_id = $3,
				legacy_aad = false`, nr.Ciphertext, nr.Nonce, nr.KeyID); err != nil {
				return err
			}
			n++
		}
		rows, err := tx.Query(ctx, `select id, signing_ciphertext, signing_nonce, signing_key_id from podium.webhooks
			where signing_legacy and signing_key_id = $1 order by id for update`, keyID)
		if err != nil {
			return err
		}
		type hook struct {
			id string
			r  SecretRow
		}
		hooks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hook, error) {
			var h hook
			err := row.Scan(&h.id, &h.r.Ciphertext, &h.r.Nonce, &h.r.KeyID)
			return h, err
		})
		if err != nil {
			return err
		}
		for _, h := range hooks {
			h.r.Name = legacyWebhookAAD(h.id)
			nr, err := reseal(h.r, WebhookKeyAAD(h.id))
			if err != nil {
				return fmt.Errorf("webhook %s: %w", h.id, err)
			}
			if _, err := tx.Exec(ctx, `update podium.webhooks set signing_ciphertext = $2, signing_nonce = $3,
				signing_key_id = $4, signing_legacy = false where id = $1`, h.id, nr.Ciphertext, nr.Nonce, nr.KeyID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
