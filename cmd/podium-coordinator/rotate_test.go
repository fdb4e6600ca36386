package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/podiumhq/podium/coordinator/coordtest"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

func loadKey(t *testing.T, path string) *secrets.Key {
	t.Helper()
	k, err := secrets.LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// storeWithSecrets is a fresh database holding the given secrets sealed
// under the key in keyFile.
func storeWithSecrets(t *testing.T, keyFile string, values map[string]string) (*store.Store, pgtest.Database) {
	t.Helper()
	db := pgtest.NewDatabase(t)
	st, err := store.Open(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	for n, v := range values {
		if _, err := secrets.NewVault(loadKey(t, keyFile), st).Set(context.Background(), n, []byte(v), "test"); err != nil {
			t.Fatal(err)
		}
	}
	return st, db
}

// serve refuses to start on a database holding secrets without the key they
// were sealed under, saying which setting to give or that rotate exists; a
// key file others can read is refused before anything else.
func TestServeRefusesStoredSecretsWithoutTheirKey(t *testing.T) {
	t.Parallel()
	key := coordtest.KeyFile(t)
	_, db := storeWithSecrets(t, key, map[string]string{"db-password": "value-1"})
	base := []string{"PODIUM_DATABASE_URL=" + db.URL, "PODIUM_TOKEN=" + strings.Repeat("t", 32)}
	open := coordtest.KeyFile(t)
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
		says string
	}{
		{base, nil, "holds 1 secret(s) and this coordinator has no secrets key: start it with PODIUM_SECRETS_KEY_FILE"},
		{append(base, "PODIUM_SECRETS_KEY_FILE="+coordtest.KeyFile(t)), nil, "secrets rotate"},
		{base, []string{"--secrets-key-file", coordtest.KeyFile(t)}, "secrets rotate"},
		{append(base, "PODIUM_SECRETS_KEY_FILE="+open), nil, "chmod 600"},
	} {
		out, code := coordinator(t, c.env, append([]string{"serve", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code != 1 || !strings.Contains(out, c.says) {
			t.Errorf("serve %s with %s: exit %d, want 1 and a refusal saying %q:\n%s", c.args, c.env[2:], code, c.says, out)
		}
	}
}

// secrets rotate reseals every secret under the new key: each opens with the
// new key and none with the old. Rotating from a key the secrets are not
// sealed under changes nothing and says so.
func TestSecretsRotate(t *testing.T) {
	t.Parallel()
	oldFile, newFile := coordtest.KeyFile(t), coordtest.KeyFile(t)
	values := map[string]string{"db-password": "value-1", "deploy-key": "value-2", "api-token": "value-3"}
	st, db := storeWithSecrets(t, oldFile, values)
	env := []string{"PODIUM_DATABASE_URL=" + db.URL, "PODIUM_SECRETS_KEY_FILE=" + oldFile}
	out, code := coordinator(t, env, "secrets", "rotate", "--new-key-file", newFile)
	if code != 0 || !strings.Contains(out, "resealed 3 secret(s)") || !strings.Contains(out, newFile) {
		t.Fatalf("rotate: exit %d:\n%s", code, out)
	}
	ctx := context.Background()
	for n, v := range values {
		refs := []*podiumv1.SecretRef{{Name: n, Env: "X"}}
		got, err := secrets.NewVault(loadKey(t, newFile), st).Resolve(ctx, refs)
		if err != nil || string(got[0].GetValue()) != v {
			t.Errorf("%s under the new key: %v, %v; want %q", n, got, err, v)
		}
		if _, err := secrets.NewVault(loadKey(t, oldFile), st).Resolve(ctx, refs); err == nil {
			t.Errorf("%s still opens under the old key", n)
		}
	}
	// Again from the old key, which no longer fits: nothing changes.
	out, code = coordinator(t, env, "secrets", "rotate", "--new-key-file", coordtest.KeyFile(t))
	if code != 1 || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("rotate from the wrong key: exit %d, want 1 saying nothing was changed:\n%s", code, out)
	}
	if err := secrets.CheckStartup(ctx, loadKey(t, newFile), st); err != nil {
		t.Fatalf("after a refused rotation the secrets should still be under the new key: %v", err)
	}
	out, code = coordinator(t, env, "secrets", "rotate")
	if code != 2 || !strings.Contains(out, "--new-key-file") {
		t.Fatalf("rotate without a new key: exit %d:\n%s", code, out)
	}
}

// secrets rotate reseals the registry passwords with the secrets, in the
// same transaction: afterwards each login opens, for an Assign, under the new
// key with its password and none under the old; a coordinator holding only
// registry logins is refused at start without their key.
func TestSecretsRotateResealsRegistryLogins(t *testing.T) {
	t.Parallel()
	oldFile, newFile := coordtest.KeyFile(t), coordtest.KeyFile(t)
	st, db := storeWithSecrets(t, oldFile, map[string]string{"db-password": "value-1"})
	ctx := context.Background()
	logins := map[string]string{"reg-a.example:5000": "password-of-a", "ghcr.io": "password-of-ghcr"}
	for host, pw := range logins {
		if _, err := secrets.NewVault(loadKey(t, oldFile), st).SetRegistry(ctx, host, "user", []byte(pw), "test"); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PODIUM_DATABASE_URL=" + db.URL, "PODIUM_SECRETS_KEY_FILE=" + oldFile}
	out, code := coordinator(t, env, "secrets", "rotate", "--new-key-file", newFile)
	if code != 0 || !strings.Contains(out, "resealed 3 secret(s) and registry password(s)") {
		t.Fatalf("rotate: exit %d, want 0 resealing the secret and both registry passwords:\n%s", code, out)
	}
	for host, pw := range logins {
		spec := &podiumv1.TaskSpec{Image: host + "/team/app:1"}
		got, err := secrets.NewVault(loadKey(t, newFile), st).RegistryAuths(ctx, spec)
		if err != nil || len(got) != 1 || got[0].GetHost() != host || got[0].GetPassword() != pw {
			t.Errorf("login for %s under the new key: %v, %v; want its password", host, got, err)
		}
		if _, err := secrets.NewVault(loadKey(t, oldFile), st).RegistryAuths(ctx, spec); err == nil {
			t.Errorf("login for %s still opens under the old key", host)
		}
	}
	if err := secrets.CheckStartup(ctx, loadKey(t, newFile), st); err != nil {
		t.Fatalf("after rotation everything should be under the new key: %v", err)
	}

	// A database with registry logins and no secrets still needs the key.
	st2, db2 := storeWithSecrets(t, oldFile, nil)
	if _, err := secrets.NewVault(loadKey(t, oldFile), st2).SetRegistry(ctx, "ghcr.io", "user", []byte("pw-123"), "test"); err != nil {
		t.Fatal(err)
	}
	out, code = coordinator(t, []string{"PODIUM_DATABASE_URL=" + db2.URL, "PODIUM_TOKEN=" + strings.Repeat("t", 32)}, "serve", "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(out, "PODIUM_SECRETS_KEY_FILE") {
		t.Fatalf("serve without the key over a stored registry login: exit %d, want 1 naming PODIUM_SECRETS_KEY_FILE:\n%s", code, out)
	}
}
