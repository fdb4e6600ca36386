package secrets

import (
	"fmt"

	"github.com/podiumhq/podium/coordinator/store"
)

// The coordinator's own keys (the apt repository's signing key, the signing
// secrets it generates for webhooks) are sealed under the same key as the
// secrets, but under associated data no secret's name can take
// (store.AptKeyAAD, store.WebhookKeyAAD): a ciphertext moved between one of
// their rows and a secret's does not open as the other. Sealing and opening
// them here, and only here, keeps that associated data in one place.

// HasKey reports whether the vault has a key to seal and open with. A nil
// vault has none.
func (v *Vault) HasKey() bool { return v != nil && v.key != nil }

// SealAptKey seals the apt repository's armored private key for its row
// (store.PutAptSigningKeyIfAbsent), under store.AptKeyAAD. The row's
// fingerprint is the caller's to fill in.
func (v *Vault) SealAptKey(raw []byte) (store.AptKeyRow, error) {
	if !v.HasKey() {
		return store.AptKeyRow{}, ErrNoKey
	}
	s, err := v.key.Seal(store.AptKeyAAD, raw)
	if err != nil {
		return store.AptKeyRow{}, err
	}
	return store.AptKeyRow{Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID, AAD: store.AptKeyAAD}, nil
}

// OpenAptKey opens the stored apt signing key, under the associated data its
// row says it was sealed under (store.AptKeyAAD, or the legacy one of a row
// no replica has re-sealed yet).
func (v *Vault) OpenAptKey(row store.AptKeyRow) ([]byte, error) {
	if !v.HasKey() {
		return nil, ErrNoKey
	}
	return v.key.Open(row.AAD, Sealed{Ciphertext: row.Ciphertext, Nonce: row.Nonce, KeyID: row.KeyID})
}

// SealWebhookKey seals the signing secret the coordinator generated for
// webhook id, as the row store.AddWebhook keeps on the webhook (named
// store.WebhookKeyAAD(id)); WebhookKey opens it again. The row's SetBy is the
// caller's to fill in.
func (v *Vault) SealWebhookKey(id string, value []byte) (store.SecretRow, error) {
	if !v.HasKey() {
		return store.SecretRow{}, ErrNoKey
	}
	aad := store.WebhookKeyAAD(id)
	s, err := v.key.Seal(aad, value)
	if err != nil {
		return store.SecretRow{}, fmt.Errorf("webhook %s: seal its signing secret: %w", id, err)
	}
	return store.SecretRow{Name: aad, Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID}, nil
}
