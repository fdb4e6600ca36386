package aptrepo

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"testing"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
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
			s, err := StoredSigner(ctx, st, key, log)
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
	if _, err := StoredSigner(ctx, st, newSecretsKey(t), log); !errors.Is(err, secrets.ErrWrongKey) {
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
	s, err := StoredSigner(ctx, st, next, log)
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
	repo, err := Load(ctx, Config{Dir: dir}, st, nil, slog.New(slog.DiscardHandler))
	if err != nil || repo != nil {
		t.Fatalf("Load without a key: %v, %v; want no repository and no error", repo, err)
	}
	repo, err = Load(ctx, Config{Dir: dir}, st, newSecretsKey(t), slog.New(slog.DiscardHandler))
	if err != nil || repo == nil || len(repo.Packages) != 1 {
		t.Fatalf("Load with a secrets key: %v, %v; want a repository of one package", repo, err)
	}
}
