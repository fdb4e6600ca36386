package aptrepo

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newSecretsKey(t *testing.T) *secrets.Key {
	t.Helper()
	raw := make([]byte, secrets.KeyBytes)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	k, err := secrets.NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Two replicas starting together on one database, each with its own
// connection pool, end up signing with the same generated key; the key is
// stored sealed under the secrets key, survives a rotation of that key, and
// without a secrets key none is made.
func TestStoredSignerIsSharedAndSealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	key := newSecretsKey(t)

	const replicas = 4
	prints := make(chan string, replicas)
	errs := make(chan error, replicas)
	for range replicas {
		go func() {
			st, err := store.Open(ctx, db.URL)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			s, err := StoredSigner(ctx, st, secrets.NewVault(key, st), log)
			if err != nil {
				errs <- err
				return
			}
			prints <- s.Fingerprint()
		}()
	}
	var first string
	for range replicas {
		select {
		case err := <-errs:
			t.Fatal(err)
		case fp := <-prints:
			if first == "" {
				first = fp
			} else if fp != first {
				t.Fatalf("replicas sign with different keys: %s and %s", first, fp)
			}
		}
	}

	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	row, err := st.AptSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if row.KeyID != key.ID() || row.Fingerprint != first {
		t.Errorf("stored key: key id %s fingerprint %s, want %s and %s", row.KeyID, row.Fingerprint, key.ID(), first)
	}
	if _, err := NewSigner(row.Ciphertext); err == nil {
		t.Error("the stored ciphertext reads as a key: it is not sealed")
	}

	// Without the secrets key it is sealed under, the stored key is not
	// usable, and without any secrets key none is made.
	if _, err := StoredSigner(ctx, st, secrets.NewVault(newSecretsKey(t), st), log); !errors.Is(err, secrets.ErrWrongKey) {
		t.Errorf("another secrets key: %v, want ErrWrongKey", err)
	}
	if _, err := StoredSigner(ctx, st, nil, log); !errors.Is(err, ErrNoSigningKey) {
		t.Errorf("no secrets key: %v, want ErrNoSigningKey", err)
	}

	// secrets rotate reseals it with the secrets.
	next := newSecretsKey(t)
	if _, err := secrets.Rotate(ctx, st, key, next); err != nil {
		t.Fatal(err)
	}
	s, err := StoredSigner(ctx, st, secrets.NewVault(next, st), log)
	if err != nil || s.Fingerprint() != first {
		t.Errorf("after secrets rotate: %v, fingerprint %v; want the same key %s", err, s, first)
	}
}

// A coordinator with packages but neither a key file nor a secrets key
// serves no repository, and says so rather than failing to start.
func TestLoadWithoutAnyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	dir := t.TempDir()
	buildDeb(t, dir, "podium-agent", "1.0.0-1", "amd64", "gzip")
	repo, why, err := Load(ctx, Config{Dir: dir}, st, nil, slog.New(slog.DiscardHandler))
	if err != nil || repo != nil || !strings.Contains(why, "PODIUM_SECRETS_KEY_FILE") {
		t.Fatalf("Load without a key: %v, %q, %v; want no repository, no error, and why naming the secrets key", repo, why, err)
	}
	if repo, why, err := Load(ctx, Config{Dir: t.TempDir()}, st, nil, slog.New(slog.DiscardHandler)); err != nil || repo != nil || !strings.Contains(why, "holds no podium-agent .deb files") {
		t.Fatalf("Load of an empty directory: %v, %q, %v; want no repository and why", repo, why, err)
	}
	repo, _, err = Load(ctx, Config{Dir: dir}, st, secrets.NewVault(newSecretsKey(t), st), slog.New(slog.DiscardHandler))
	if err != nil || repo == nil || len(repo.Packages) != 1 {
		t.Fatalf("Load with a secrets key: %v, %v; want a repository of one package", repo, err)
	}
}

// Issue 28, hole 7: the apt signing key used to be sealed with
// "apt-signing-key" as associated data, which is also a valid secret name,
// so its ciphertext set on a secret of that name opened as that secret (a
// task naming it would receive the repository's private key), and a
// secret's ciphertext on the key's row opened as the key (whoever can set
// that secret chooses what the repository is signed with). Sealed under
// store.AptKeyAAD, which no secret name can be, neither opens as the other.
func TestAptKeyAndASecretOfItsOldNameDoNotOpenAsEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log := slog.New(slog.DiscardHandler)
	key := newSecretsKey(t)
	vault := secrets.NewVault(key, st)
	if p := taskspec.SecretNameProblem(store.LegacyAptKeyAAD); p != "" {
		t.Fatalf("%s is not a valid secret name (%s): the test tests nothing", store.LegacyAptKeyAAD, p)
	}
	if p := taskspec.SecretNameProblem(store.AptKeyAAD); p == "" {
		t.Fatalf("%s is a valid secret name: a secret could take it", store.AptKeyAAD)
	}

	signer, err := StoredSigner(ctx, st, secrets.NewVault(key, st), log)
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.AptSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The key's sealed value copied onto a secret of the old name.
	if _, err := pool.Exec(ctx, `insert into podium.secrets (name, ciphertext, nonce, key_id, set_by)
		values ($1, $2, $3, $4, 'mallory')`, store.LegacyAptKeyAAD, row.Ciphertext, row.Nonce, row.KeyID); err != nil {
		t.Fatal(err)
	}
	got, err := vault.Resolve(ctx, []*podiumv1.SecretRef{{Name: store.LegacyAptKeyAAD, Env: "K"}})
	if err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("the apt key's ciphertext as secret %s: %d value(s), %v; want it not to open", store.LegacyAptKeyAAD, len(got), err)
	}

	// A key of mallory's set as that secret, its sealed value copied onto
	// the apt key's row.
	raw, err := GenerateKey("mallory")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vault.Set(ctx, store.LegacyAptKeyAAD, raw, "mallory"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update podium.apt_signing_key set (ciphertext, nonce) =
		(select ciphertext, nonce from podium.secrets where name = $1)`, store.LegacyAptKeyAAD); err != nil {
		t.Fatal(err)
	}
	s, err := StoredSigner(ctx, st, secrets.NewVault(key, st), log)
	if err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("a secret's ciphertext on the apt key's row: signer %v, %v; want it not to open (the key was %s)", s, err, signer.Fingerprint())
	}
}
