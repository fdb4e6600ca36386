package secrets

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// ErrNoKey means the coordinator has no secrets key, so it can neither seal
// nor open a secret.
var ErrNoKey = errors.New("this coordinator has no secrets key: start it with PODIUM_SECRETS_KEY_FILE (or --secrets-key-file) naming a file of 32 random bytes (see docs/operations.md, \"Secrets key\")")

// Vault is the stored secrets seen through the coordinator's key: it seals
// values on the way into the store and opens them on the way to a node.
type Vault struct {
	key   *Key // nil when none is configured
	store *store.Store
}

// NewVault returns a vault over st; key may be nil, and then every call that
// needs a value fails with ErrNoKey.
func NewVault(key *Key, st *store.Store) *Vault { return &Vault{key: key, store: st} }

// CheckValue says what is wrong with a secret's name or value, or nil.
func CheckValue(name string, value []byte) error {
	if p := taskspec.SecretNameProblem(name); p != "" {
		return errors.New(p)
	}
	if len(value) == 0 {
		return fmt.Errorf("secret %s: the value is empty", name)
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("secret %s: the value is %d bytes, more than %d: keep large files in an image or artifact, and their key here", name, len(value), MaxValueBytes)
	}
	return nil
}

// Set seals value and stores it as the secret name, replacing any value it
// had, and grants it to allow (validated principals, added to those it has)
// in the same transaction. It reports whether the name was new.
func (v *Vault) Set(ctx context.Context, name string, value []byte, setBy string, allow ...string) (bool, error) {
	if err := CheckValue(name, value); err != nil {
		return false, err
	}
	if v.key == nil {
		return false, ErrNoKey
	}
	s, err := v.key.Seal(name, value)
	if err != nil {
		return false, err
	}
	return v.store.PutSecret(ctx, store.SecretRow{Name: name, Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID, SetBy: setBy, Allow: allow})
}

// MissingError names the secrets a task asks for that are not stored.
type MissingError struct{ Names []string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("no secret named %s: set it with `podium secret set NAME` (see `podium secret ls`)", strings.Join(e.Names, ", "))
}

// Resolve opens the current values of refs, each with where the task
// receives it. A secret that is not stored is a *MissingError. Building an
// assignment uses ResolvePinned instead, so the node can be sent the same
// values again.
func (v *Vault) Resolve(ctx context.Context, refs []*podiumv1.SecretRef) ([]*podiumv1.SecretValue, error) {
	return v.resolve(ctx, refs, v.store.SealedSecrets)
}

// ResolvePinned opens the values of refs for the assignment of one attempt
// of a task, pinning the version of each secret current now (the first time
// the attempt's assignment is built; a redelivery gets what was pinned then).
// The node holding the attempt gets the same versions again after it
// restarts (ResolveAdopted). A secret that is not stored is a *MissingError.
func (v *Vault) ResolvePinned(ctx context.Context, taskID string, attempt int32, refs []*podiumv1.SecretRef) ([]*podiumv1.SecretValue, error) {
	return v.resolve(ctx, refs, func(ctx context.Context, names []string) (map[string]store.SecretRow, error) {
		return v.store.PinSecrets(ctx, taskID, attempt, names)
	})
}

// ResolveAdopted opens the values of refs that one attempt of a task was
// assigned, for its node to redact again after a restart: the pinned
// versions, which is what the container holds, however often the secrets
// were set or whether they were deleted since. A name the attempt pins no
// version of (assigned before versions existed) gets its current value; one
// neither pinned nor stored is a *MissingError.
func (v *Vault) ResolveAdopted(ctx context.Context, taskID string, attempt int32, refs []*podiumv1.SecretRef) ([]*podiumv1.SecretValue, error) {
	return v.resolve(ctx, refs, func(ctx context.Context, names []string) (map[string]store.SecretRow, error) {
		return v.store.PinnedSecrets(ctx, taskID, attempt, names)
	})
}

// resolve opens what read returns for the names of refs.
func (v *Vault) resolve(ctx context.Context, refs []*podiumv1.SecretRef,
	read func(context.Context, []string) (map[string]store.SecretRow, error)) ([]*podiumv1.SecretValue, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if v.key == nil {
		return nil, ErrNoKey
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.GetName()
	}
	rows, err := read(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]*podiumv1.SecretValue, 0, len(refs))
	var missing []string
	for _, r := range refs {
		row, ok := rows[r.GetName()]
		if !ok {
			missing = append(missing, r.GetName())
			continue
		}
		val, err := v.key.Open(row.Name, Sealed{Ciphertext: row.Ciphertext, Nonce: row.Nonce, KeyID: row.KeyID})
		if err != nil {
			return nil, err
		}
		out = append(out, &podiumv1.SecretValue{Name: r.GetName(), Value: val, Env: r.GetEnv(), File: r.GetFile()})
	}
	if len(missing) > 0 {
		return nil, &MissingError{Names: missing}
	}
	return out, nil
}

// ErrNoWebhookKey means a webhook has no generated signing secret of its
// own: it was removed, or signs with a stored secret it names.
var ErrNoWebhookKey = errors.New("the webhook has no signing secret of its own")

// WebhookKey opens the signing secret the coordinator generated for webhook
// id, kept sealed on the webhook's row under associated data no secret name
// can take (store.WebhookKeyAAD), so that no task can name it.
func (v *Vault) WebhookKey(ctx context.Context, id string) ([]byte, error) {
	if v.key == nil {
		return nil, ErrNoKey
	}
	row, err := v.store.WebhookSigningKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoWebhookKey
	}
	if err != nil {
		return nil, err
	}
	val, err := v.key.Open(row.Name, Sealed{Ciphertext: row.Ciphertext, Nonce: row.Nonce, KeyID: row.KeyID})
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", id, err)
	}
	return val, nil
}

// CheckStartup refuses a coordinator that could not open the stored secrets:
// one with no key while secrets are stored, or one whose key is not the one
// they were sealed under. Better to stop at start, saying which, than to fail
// every task that names a secret.
//
// With the key, it then re-seals the coordinator's own keys still sealed
// under associated data a secret's name could take (store.ResealLegacy):
// the apt signing key and the webhook signing secrets of coordinators
// before migration 0033. Every replica runs it at start; each row is
// re-sealed once.
func CheckStartup(ctx context.Context, key *Key, st *store.Store) error {
	if err := checkKeyIDs(ctx, key, st); err != nil {
		return err
	}
	if key == nil {
		return nil
	}
	if _, err := st.ResealLegacy(ctx, key.ID(), func(r store.SecretRow, aad string) (store.SecretRow, error) {
		val, err := key.Open(r.Name, Sealed{Ciphertext: r.Ciphertext, Nonce: r.Nonce, KeyID: r.KeyID})
		if err != nil {
			return r, err
		}
		s, err := key.Seal(aad, val)
		if err != nil {
			return r, err
		}
		return store.SecretRow{Name: aad, Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID}, nil
	}); err != nil {
		return fmt.Errorf("secrets: re-seal the coordinator's own keys under their own associated data: %w", err)
	}
	return nil
}

func checkKeyIDs(ctx context.Context, key *Key, st *store.Store) error {
	ids, err := st.SecretKeyIDs(ctx)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	total := 0
	var others []string
	for id, n := range ids {
		total += n
		if key == nil || id != key.ID() {
			others = append(others, fmt.Sprintf("%d under key id %s", n, id))
		}
	}
	sort.Strings(others)
	switch {
	case total == 0:
		return nil
	case key == nil:
		return fmt.Errorf("the database holds %d secret(s) and %w", total, ErrNoKey)
	case len(others) > 0:
		return fmt.Errorf("the database holds secrets this coordinator's key (id %s) cannot open (%s): start it with the key they were set under, "+
			"or rotate them to this one with `podium-coordinator secrets rotate --key-file OLD --new-key-file NEW`", key.ID(), strings.Join(others, ", "))
	}
	return nil
}

// Rotate reseals every stored secret (every version kept of each) and the
// coordinator's own keys from old to new in one transaction: if any does
// not open with old, none is changed. It returns how many
// were resealed.
func Rotate(ctx context.Context, st *store.Store, old, new *Key) (int, error) {
	return st.RotateSecrets(ctx, func(r store.SecretRow) (store.SecretRow, error) {
		val, err := old.Open(r.Name, Sealed{Ciphertext: r.Ciphertext, Nonce: r.Nonce, KeyID: r.KeyID})
		if err != nil {
			return r, err
		}
		s, err := new.Seal(r.Name, val)
		if err != nil {
			return r, err
		}
		return store.SecretRow{Name: r.Name, Ciphertext: s.Ciphertext, Nonce: s.Nonce, KeyID: s.KeyID}, nil
	})
}
