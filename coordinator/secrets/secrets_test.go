package secrets_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newKey(t *testing.T) *secrets.Key {
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

func openStore(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	// The test's own pool, to look at the rows behind the store's back.
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return st, pool
}

// A sealed value opens only under the name it was sealed for and the key it
// was sealed with, and two seals of one value differ (a fresh nonce each).
func TestSealOpensOnlyUnderItsNameAndKey(t *testing.T) {
	t.Parallel()
	k, other := newKey(t), newKey(t)
	value := []byte("hunter2-hunter2")
	s1, err := k.Seal("db-password", value)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := k.Seal("db-password", value)
	if bytes.Equal(s1.Nonce, s2.Nonce) || bytes.Equal(s1.Ciphertext, s2.Ciphertext) {
		t.Fatal("two seals of one value share a nonce or a ciphertext")
	}
	if bytes.Contains(s1.Ciphertext, value) {
		t.Fatal("the ciphertext holds the value")
	}
	got, err := k.Open("db-password", s1)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v; want the value", got, err)
	}
	if _, err := k.Open("deploy-key", s1); err == nil || !strings.Contains(err.Error(), "set it again") {
		t.Fatalf("opening under another name: %v, want a refusal saying to set it again", err)
	}
	if _, err := other.Open("db-password", s1); !errors.Is(err, secrets.ErrWrongKey) {
		t.Fatalf("opening with another key: %v, want ErrWrongKey", err)
	}
	// Even when the key id is forged to match, the other key cannot open it.
	forged := s1
	forged.KeyID = other.ID()
	if _, err := other.Open("db-password", forged); err == nil {
		t.Fatal("another key opened the value")
	}
}

// The key file must be exactly 32 bytes and private to its owner; each
// refusal says what to do.
func TestLoadKeyFileChecksLengthAndMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, n int, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		raw := make([]byte, n)
		_, _ = rand.Read(raw)
		if err := os.WriteFile(p, raw, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := secrets.LoadKeyFile(write("good", 32, 0o600)); err != nil {
		t.Fatalf("a 32-byte 0600 key: %v", err)
	}
	if _, err := secrets.LoadKeyFile(write("good-ro", 32, 0o400)); err != nil {
		t.Fatalf("a 32-byte 0400 key: %v", err)
	}
	for _, c := range []struct {
		name string
		n    int
		mode os.FileMode
		want string
	}{
		{"short", 31, 0o600, "head -c 32 /dev/urandom"},
		{"newline", 33, 0o600, "want exactly 32"},
		{"group", 32, 0o640, "chmod 600"},
		{"world", 32, 0o604, "chmod 600"},
	} {
		_, err := secrets.LoadKeyFile(write(c.name, c.n, c.mode))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (%d bytes, %04o): %v, want an error saying %q", c.name, c.n, c.mode, err, c.want)
		}
	}
	if _, err := secrets.LoadKeyFile(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing key file was accepted")
	}
}

// Set stores only a ciphertext (the value is nowhere in the row), Resolve
// gives the value back with where the task wants it, names that are not
// stored are a MissingError naming them, and the list holds names, who and
// when.
func TestVaultSetsResolvesListsDeletes(t *testing.T) {
	t.Parallel()
	st, pool := openStore(t)
	ctx := context.Background()
	v := secrets.NewVault(newKey(t), st)
	value := []byte("s3cr3t-value-0123")
	created, err := v.Set(ctx, "db-password", value, "alice")
	if err != nil || !created {
		t.Fatalf("Set = %v, %v; want created", created, err)
	}
	if created, err := v.Set(ctx, "db-password", value, "bob"); err != nil || created {
		t.Fatalf("Set again = %v, %v; want replaced", created, err)
	}
	var ct, nonce []byte
	if err := pool.QueryRow(ctx, "select ciphertext, nonce from podium.secrets where name = 'db-password'").Scan(&ct, &nonce); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, value) || len(nonce) != 12 {
		t.Fatalf("stored row: ciphertext holds the value or nonce is %d bytes", len(nonce))
	}
	got, err := v.Resolve(ctx, []*podiumv1.SecretRef{{Name: "db-password", Env: "PGPASSWORD", File: "pw"}})
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].GetValue(), value) || got[0].GetEnv() != "PGPASSWORD" || got[0].GetFile() != "pw" {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	_, err = v.Resolve(ctx, []*podiumv1.SecretRef{{Name: "db-password"}, {Name: "nope"}, {Name: "gone"}})
	var missing *secrets.MissingError
	if !errors.As(err, &missing) || strings.Join(missing.Names, ",") != "nope,gone" || !strings.Contains(err.Error(), "podium secret set") {
		t.Fatalf("Resolve with unknown names: %v, want a MissingError naming nope and gone", err)
	}
	list, err := st.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "db-password" || list[0].SetBy != "bob" || list[0].SetAt.IsZero() || list[0].Ciphertext != nil {
		t.Fatalf("ListSecrets = %+v, %v", list, err)
	}
	if err := st.DeleteSecret(ctx, "db-password"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSecret(ctx, "db-password"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
}

// Values are bounded and names DNS-style, before anything is stored; a vault
// without a key refuses to seal, saying how to configure one.
func TestVaultRefusesBadNamesValuesAndNoKey(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	ctx := context.Background()
	v := secrets.NewVault(newKey(t), st)
	for _, c := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"DB", []byte("x"), "lower-case"},
		{"-db", []byte("x"), "starts or ends"},
		{strings.Repeat("a", 64), []byte("x"), "longer than 63"},
		{"db", nil, "empty"},
		{"db", make([]byte, secrets.MaxValueBytes+1), "more than 65536"},
	} {
		if _, err := v.Set(ctx, c.name, c.value, "alice"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%.10q, %d bytes) = %v, want an error saying %q", c.name, len(c.value), err, c.want)
		}
	}
	if _, err := v.Set(ctx, "db", make([]byte, secrets.MaxValueBytes), "alice"); err != nil {
		t.Errorf("a value of exactly %d bytes: %v", secrets.MaxValueBytes, err)
	}
	if _, err := secrets.NewVault(nil, st).Set(ctx, "db", []byte("x"), "alice"); !errors.Is(err, secrets.ErrNoKey) || !strings.Contains(err.Error(), "PODIUM_SECRETS_KEY_FILE") {
		t.Fatalf("Set without a key: %v, want ErrNoKey naming PODIUM_SECRETS_KEY_FILE", err)
	}
}

// Rotation reseals every secret: afterwards each opens with the new key and
// none with the old; the values are unchanged.
func TestRotateKeepsEverySecretReadableUnderTheNewKeyOnly(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	ctx := context.Background()
	old, nw := newKey(t), newKey(t)
	values := map[string][]byte{"a": []byte("value-of-a"), "db-password": []byte("pw-123456"), "deploy-key": []byte("-----BEGIN KEY-----")}
	for n, val := range values {
		if _, err := secrets.NewVault(old, st).Set(ctx, n, val, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	n, err := secrets.Rotate(ctx, st, old, nw)
	if err != nil || n != len(values) {
		t.Fatalf("Rotate = %d, %v; want %d", n, err, len(values))
	}
	for name, val := range values {
		got, err := secrets.NewVault(nw, st).Resolve(ctx, []*podiumv1.SecretRef{{Name: name, Env: "X"}})
		if err != nil || !bytes.Equal(got[0].GetValue(), val) {
			t.Errorf("%s under the new key: %v, %v", name, got, err)
		}
		if _, err := secrets.NewVault(old, st).Resolve(ctx, []*podiumv1.SecretRef{{Name: name, Env: "X"}}); err == nil {
			t.Errorf("%s still opens under the old key", name)
		}
	}
	if err := secrets.CheckStartup(ctx, nw, st); err != nil {
		t.Errorf("CheckStartup with the new key: %v", err)
	}
	if err := secrets.CheckStartup(ctx, old, st); err == nil || !strings.Contains(err.Error(), "secrets rotate") {
		t.Errorf("CheckStartup with the old key: %v, want a refusal pointing at rotate", err)
	}
}

// Rotation with the wrong old key changes nothing: it is one transaction.
func TestRotateWithTheWrongOldKeyChangesNothing(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	ctx := context.Background()
	k := newKey(t)
	for _, n := range []string{"a", "b"} {
		if _, err := secrets.NewVault(k, st).Set(ctx, n, []byte("value-"+n), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := secrets.Rotate(ctx, st, newKey(t), newKey(t)); !errors.Is(err, secrets.ErrWrongKey) {
		t.Fatalf("Rotate with a wrong old key: %v, want ErrWrongKey", err)
	}
	got, err := secrets.NewVault(k, st).Resolve(ctx, []*podiumv1.SecretRef{{Name: "a"}, {Name: "b"}})
	if err != nil || string(got[0].GetValue()) != "value-a" || string(got[1].GetValue()) != "value-b" {
		t.Fatalf("after a failed rotation: %v, %v; want both still under the original key", got, err)
	}
}

// A coordinator without a key starts while no secret is stored, and refuses
// once one is, naming the setting.
func TestCheckStartupRefusesStoredSecretsWithoutAKey(t *testing.T) {
	t.Parallel()
	st, _ := openStore(t)
	ctx := context.Background()
	if err := secrets.CheckStartup(ctx, nil, st); err != nil {
		t.Fatalf("no secrets, no key: %v", err)
	}
	if _, err := secrets.NewVault(newKey(t), st).Set(ctx, "a", []byte("value"), "alice"); err != nil {
		t.Fatal(err)
	}
	err := secrets.CheckStartup(ctx, nil, st)
	if err == nil || !strings.Contains(err.Error(), "holds 1 secret") || !strings.Contains(err.Error(), "PODIUM_SECRETS_KEY_FILE") {
		t.Fatalf("a secret, no key: %v, want a refusal naming PODIUM_SECRETS_KEY_FILE", err)
	}
}
