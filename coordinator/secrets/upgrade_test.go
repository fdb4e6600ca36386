package secrets_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// An upgrade over a database as the release before versions left it:
// migration 0033 numbers the stored secrets 1, pins version 1 for the
// attempts running, and moves a webhook's generated signing secret out of
// the secrets (sealed as it was, under its old name) onto the webhook's row;
// then replicas starting together re-seal that secret and the apt signing
// key under associated data no secret name can take, each once. Afterwards
// the webhook's secret and the apt key open under their new associated
// data and not under the old, and a task can name neither.
func TestUpgradeMovesTheCoordinatorsKeysOutOfTheSecrets(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "drop schema podium cascade"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateThrough(ctx, c, "0031_user_groups"); err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	seal := func(aad, value string) secrets.Sealed {
		t.Helper()
		s, err := key.Seal(aad, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const hookID, hookSecret = "hook_01M94Y638SRSZZ569Y9R3ERY2T", "webhook-01m94y638srszz569y9r3ery2t"
	const signing, aptValue = "generated-signing-secret-0123456789", "armored-apt-key-stand-in"
	for name, value := range map[string]string{"db-password": "pw-1", hookSecret: signing} {
		s := seal(name, value)
		if _, err := c.Exec(ctx, `insert into podium.secrets (name, ciphertext, nonce, key_id, set_by) values ($1, $2, $3, $4, 'alice')`,
			name, s.Ciphertext, s.Nonce, s.KeyID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Exec(ctx, `insert into podium.webhooks (id, url, events, secret_name, generated_secret, created_by)
		values ($1, 'https://hooks.example.com/x', '{task.finished}', $2, true, 'alice')`, hookID, hookSecret); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `insert into podium.webhook_outbox (event_id, event_type, webhook_id, url, secret_name, per_task, payload)
		values ('evt_1', 'task.finished', $1, 'https://hooks.example.com/x', $2, false, '{}')`, hookID, hookSecret); err != nil {
		t.Fatal(err)
	}
	apt := seal(store.LegacyAptKeyAAD, aptValue)
	if _, err := c.Exec(ctx, `insert into podium.apt_signing_key (ciphertext, nonce, key_id, fingerprint) values ($1, $2, $3, 'F00')`,
		apt.Ciphertext, apt.Nonce, apt.KeyID); err != nil {
		t.Fatal(err)
	}
	for id, state := range map[string]string{"task_running": "running", "task_done": "succeeded"} {
		if _, err := c.Exec(ctx, `insert into podium.tasks (id, spec, state, attempt, node_id)
			values ($1, '{"image": "busybox", "secrets": [{"name": "db-password"}]}', $2, 1, 'node_x')`, id, state); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "insert into podium.attempts (task_id, attempt, node_id) values ($1, 1, 'node_x')", id); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := schema.Migrate(ctx, c)
	if err != nil || !slices.Contains(applied, "0033_secret_versions") {
		t.Fatalf("migrate: %v, %v; want 0033_secret_versions applied", applied, err)
	}

	// Several replicas start at once.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			st, err := store.Open(ctx, db.URL)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			errs <- secrets.CheckStartup(ctx, key, st)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a replica's start: %v", err)
		}
	}

	st, err := store.Open(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := secrets.NewVault(key, st)
	list, err := st.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "db-password" || list[0].Version != 1 {
		t.Fatalf("secrets after the upgrade: %+v, %v; want only db-password, at version 1", list, err)
	}
	if _, err := v.Resolve(ctx, []*podiumv1.SecretRef{{Name: hookSecret}}); err == nil || !strings.Contains(err.Error(), "no secret named "+hookSecret) {
		t.Fatalf("the webhook's signing secret by its old name: %v, want no such secret", err)
	}
	pins, err := st.SecretPins(ctx, "task_running")
	if err != nil || len(pins) != 1 || pins[0] != (store.SecretPin{TaskID: "task_running", Attempt: 1, Name: "db-password", Version: 1}) {
		t.Fatalf("pins of the running task: %+v, %v; want db-password version 1", pins, err)
	}
	if pins, _ := st.SecretPins(ctx, "task_done"); len(pins) != 0 {
		t.Fatalf("a finished task got pins: %+v", pins)
	}
	got, err := v.WebhookKey(ctx, hookID)
	if err != nil || string(got) != signing {
		t.Fatalf("the webhook's signing secret: %q, %v; want the one it had", got, err)
	}
	var secretName, outboxSecret string
	var legacy bool
	var ct, nonce []byte
	var keyID string
	if err := c.QueryRow(ctx, `select secret_name, signing_legacy, signing_ciphertext, signing_nonce, signing_key_id
		from podium.webhooks where id = $1`, hookID).Scan(&secretName, &legacy, &ct, &nonce, &keyID); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "select secret_name from podium.webhook_outbox").Scan(&outboxSecret); err != nil {
		t.Fatal(err)
	}
	if secretName != "" || outboxSecret != "" || legacy {
		t.Fatalf("webhook row: secret_name %q (outbox %q), still legacy %v; want no secret name and re-sealed", secretName, outboxSecret, legacy)
	}
	sealed := secrets.Sealed{Ciphertext: ct, Nonce: nonce, KeyID: keyID}
	if _, err := key.Open(hookSecret, sealed); err == nil {
		t.Fatal("the webhook's signing secret still opens under its old name")
	}
	if val, err := key.Open(store.WebhookKeyAAD(hookID), sealed); err != nil || string(val) != signing {
		t.Fatalf("the webhook's signing secret under %s: %q, %v", store.WebhookKeyAAD(hookID), val, err)
	}
	row, err := st.AptSigningKey(ctx)
	if err != nil || row.AAD != store.AptKeyAAD {
		t.Fatalf("the apt key after the start: %+v, %v; want it under %s", row, err, store.AptKeyAAD)
	}
	aptSealed := secrets.Sealed{Ciphertext: row.Ciphertext, Nonce: row.Nonce, KeyID: row.KeyID}
	if _, err := key.Open(store.LegacyAptKeyAAD, aptSealed); err == nil {
		t.Fatal("the apt key still opens under its old associated data")
	}
	if val, err := key.Open(store.AptKeyAAD, aptSealed); err != nil || string(val) != aptValue {
		t.Fatalf("the apt key under %s: %v", store.AptKeyAAD, err)
	}
	// A rotation takes them along.
	next := newKey(t)
	if n, err := secrets.Rotate(ctx, st, key, next); err != nil || n != 3 {
		t.Fatalf("Rotate = %d, %v; want 3 (db-password, the webhook's secret, the apt key)", n, err)
	}
	if got, err := secrets.NewVault(next, st).WebhookKey(ctx, hookID); err != nil || string(got) != signing {
		t.Fatalf("the webhook's signing secret after rotation: %v", err)
	}
}
