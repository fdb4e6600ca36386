// Package secrets seals the values of stored secrets (podium secret set) and
// opens them again when a task's assignment needs them. Values are sealed
// with AES-256-GCM under a key the coordinator reads from a file
// (PODIUM_SECRETS_KEY_FILE), with a fresh random nonce each time and the
// secret's name as associated data, so a ciphertext copied onto another
// name's row does not open. Only ciphertexts reach Postgres; the key never
// does.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// KeyBytes is the key's length: AES-256.
const KeyBytes = 32

// MaxValueBytes bounds a secret's value. Secrets are passwords, tokens and
// keys; a value this large is a file that belongs in an artifact or an image,
// and each value travels in every assignment that names it.
const MaxValueBytes = 64 << 10

// Key is a loaded sealing key.
type Key struct {
	aead cipher.AEAD
	id   string
}

// NewKey makes a key from exactly KeyBytes bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeyBytes {
		return nil, fmt.Errorf("the secrets key is %d bytes, want exactly %d random bytes: make one with `head -c 32 /dev/urandom > podium-secrets.key`", len(raw), KeyBytes)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("podium secrets key id\x00"), raw...))
	return &Key{aead: aead, id: hex.EncodeToString(sum[:8])}, nil
}

// LoadKeyFile reads a key from path. The file must hold exactly KeyBytes
// bytes and must not be readable by its group or by others: a key anyone on
// the machine can read protects nothing.
func LoadKeyFile(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s has mode %04o, readable by others than its owner: run `chmod 600 %s`", path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	k, err := NewKey(raw)
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return k, nil
}

// ID names the key without revealing it: the first 8 bytes of a hash of it,
// in hex. It is stored with each secret so that a coordinator started with a
// different key says so instead of failing to open every secret.
func (k *Key) ID() string { return k.id }

// Sealed is a secret's value as stored.
type Sealed struct {
	Ciphertext, Nonce []byte
	KeyID             string
}

// Seal encrypts value for the secret name under a fresh random nonce.
func (k *Key) Seal(name string, value []byte) (Sealed, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, err
	}
	return Sealed{Ciphertext: k.aead.Seal(nil, nonce, value, []byte(name)), Nonce: nonce, KeyID: k.id}, nil
}

// ErrWrongKey means a secret was sealed under another key than this one.
var ErrWrongKey = errors.New("sealed under a different key")

// Open decrypts the secret name's sealed value.
func (k *Key) Open(name string, s Sealed) ([]byte, error) {
	if s.KeyID != k.id {
		return nil, fmt.Errorf("secret %s was %w (key id %s; this coordinator's is %s): start the coordinator with the key it was set under, or set the secret again", name, ErrWrongKey, s.KeyID, k.id)
	}
	v, err := k.aead.Open(nil, s.Nonce, s.Ciphertext, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("secret %s does not decrypt with this key (altered, or moved from another name): set it again", name)
	}
	return v, nil
}
