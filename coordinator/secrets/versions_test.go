package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// runningTask makes a task running its first attempt, as the scheduler
// leaves one, so that attempts can pin secrets.
func runningTask(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `insert into podium.tasks (id, spec, state, attempt, node_id)
		values ($1, '{"image": "busybox", "secrets": [{"name": "db"}]}', 'running', 1, 'node_x')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "insert into podium.attempts (task_id, attempt, node_id) values ($1, 1, 'node_x')", id); err != nil {
		t.Fatal(err)
	}
}

// value resolves the secret db as the attempt's node would get it: at
// assignment (pin) or at adoption after a restart.
func value(t *testing.T, v *secrets.Vault, task string, pin bool) string {
	t.Helper()
	refs := []*podiumv1.SecretRef{{Name: "db", Env: "DB"}}
	resolve := v.ResolveAdopted
	if pin {
		resolve = v.ResolvePinned
	}
	got, err := resolve(context.Background(), task, 1, refs)
	if err != nil {
		t.Fatalf("resolve db for %s (pin %v): %v", task, pin, err)
	}
	return string(got[0].GetValue())
}

func versions(t *testing.T, st *store.Store) []int32 {
	t.Helper()
	vs, err := st.SecretVersions(context.Background(), "db")
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// Each set makes the next version; an attempt gets the version current at
// its assignment and the same one at adoption, however often the secret is
// set since; a replaced version is kept only while an attempt pins it, and
// the retention job deletes it once the attempt has ended. Rotation reseals
// every kept version with the current ones. A deleted secret's pinned value
// stays for the attempt that holds it, while new assignments fail.
func TestVersionsPinnedKeptRotatedAndTrimmed(t *testing.T) {
	t.Parallel()
	st, pool := openStore(t)
	ctx := context.Background()
	key := newKey(t)
	v := secrets.NewVault(key, st)
	set := func(val string) {
		t.Helper()
		if _, err := v.Set(ctx, "db", []byte(val), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	set("value-1")
	for _, id := range []string{"task_a", "task_b", "task_c"} {
		runningTask(t, pool, id)
	}
	if got := value(t, v, "task_a", true); got != "value-1" {
		t.Fatalf("task_a assigned %q, want value-1", got)
	}
	set("value-2")
	if got := versions(t, st); !slices.Equal(got, []int32{1, 2}) {
		t.Fatalf("versions kept after a set while task_a pins 1: %v, want [1 2]", got)
	}
	if got := value(t, v, "task_b", true); got != "value-2" {
		t.Fatalf("task_b assigned %q, want value-2", got)
	}
	set("value-3")
	set("value-4") // 3 was pinned by nobody: not kept
	if got := versions(t, st); !slices.Equal(got, []int32{1, 2, 4}) {
		t.Fatalf("versions kept: %v, want [1 2 4] (3 was never pinned)", got)
	}
	list, err := st.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Version != 4 {
		t.Fatalf("ListSecrets = %+v, %v; want db at version 4", list, err)
	}
	// A redelivery of task_a's assignment gets what it pinned, not the current.
	if got := value(t, v, "task_a", true); got != "value-1" {
		t.Fatalf("task_a's assignment built again gives %q, want its pinned value-1", got)
	}

	// Rotation reseals every version: each attempt still gets its own.
	next := newKey(t)
	n, err := secrets.Rotate(ctx, st, key, next)
	if err != nil || n != 3 {
		t.Fatalf("Rotate = %d, %v; want 3 rows (versions 1, 2 and the current 4)", n, err)
	}
	v = secrets.NewVault(next, st)
	if a, b := value(t, v, "task_a", false), value(t, v, "task_b", false); a != "value-1" || b != "value-2" {
		t.Fatalf("after rotation the adoptions get %q and %q, want value-1 and value-2", a, b)
	}
	if _, err := secrets.NewVault(key, st).ResolveAdopted(ctx, "task_a", 1, []*podiumv1.SecretRef{{Name: "db"}}); !errors.Is(err, secrets.ErrWrongKey) {
		t.Fatalf("a kept version under the old key after rotation: %v, want ErrWrongKey", err)
	}
	if err := secrets.CheckStartup(ctx, next, st); err != nil {
		t.Fatalf("CheckStartup with the new key: %v", err)
	}

	// task_a ends: the retention job releases its pin and deletes version 1;
	// version 2 stays while task_b runs.
	if _, err := pool.Exec(ctx, "update podium.tasks set state = 'succeeded', finished_at = now() where id = 'task_a'"); err != nil {
		t.Fatal(err)
	}
	job := retention.NewJob(retention.Config{Batch: 1}, retention.Deps{Store: st, Log: slog.New(slog.DiscardHandler)})
	stats, err := job.Pass(ctx)
	if err != nil || stats.SecretPins != 1 || stats.SecretVersions != 1 {
		t.Fatalf("retention pass: %+v, %v; want 1 pin released and 1 version deleted", stats, err)
	}
	if got := versions(t, st); !slices.Equal(got, []int32{2, 4}) {
		t.Fatalf("versions kept after task_a ended: %v, want [2 4]", got)
	}
	if got := value(t, v, "task_b", false); got != "value-2" {
		t.Fatalf("task_b's adoption gets %q, want value-2", got)
	}

	// Deleted: task_b keeps its version; a new assignment fails.
	if err := st.DeleteSecret(ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, v, "task_b", false); got != "value-2" {
		t.Fatalf("task_b's adoption after the secret was deleted gets %q, want value-2", got)
	}
	var missing *secrets.MissingError
	if _, err := v.ResolvePinned(ctx, "task_c", 1, []*podiumv1.SecretRef{{Name: "db"}}); !errors.As(err, &missing) || !strings.Contains(err.Error(), "no secret named db") {
		t.Fatalf("a new assignment after the delete: %v, want a MissingError", err)
	}
	// Set again: its versions go on past the kept one, so pins never name two values.
	set("value-5")
	if got := versions(t, st); !slices.Equal(got, []int32{2, 3}) {
		t.Fatalf("versions after a delete and a new set: %v, want the kept 2 and the new 3", got)
	}
	if got := value(t, v, "task_b", false); got != "value-2" {
		t.Fatalf("task_b's adoption after the secret was set anew gets %q, want value-2", got)
	}
	if _, err := pool.Exec(ctx, "update podium.tasks set state = 'failed', finished_at = now() where id = 'task_b'"); err != nil {
		t.Fatal(err)
	}
	if _, err := job.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, st); !slices.Equal(got, []int32{3}) {
		t.Fatalf("versions after every pinning task ended: %v, want only the current 3", got)
	}
}

// Assignments pinning a secret while it is set again and again, with the
// retention job passing meanwhile: every attempt's adoption still gets
// exactly the value its assignment got. (A pin is made under a shared lock
// on the current row, so a set waits for it and keeps the value it
// replaces.) Every task here runs on, so the passes release no pin; that
// trimming deletes only what no attempt pins is
// TestVersionsPinnedKeptRotatedAndTrimmed's.
func TestPinsRaceSetsWhileRetentionPasses(t *testing.T) {
	t.Parallel()
	st, pool := openStore(t)
	ctx := context.Background()
	v := secrets.NewVault(newKey(t), st)
	if _, err := v.Set(ctx, "db", []byte("value-0"), "alice"); err != nil {
		t.Fatal(err)
	}
	const tasks, sets = 40, 20
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("task_%02d", i)
		runningTask(t, pool, ids[i])
	}
	assigned := make([]string, tasks)
	errs := make(chan error, tasks+sets+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= sets; i++ {
			if _, err := v.Set(ctx, "db", fmt.Appendf(nil, "value-%d", i), "alice"); err != nil {
				errs <- err
			}
		}
	})
	job := retention.NewJob(retention.Config{Batch: 2}, retention.Deps{Store: st, Log: slog.New(slog.DiscardHandler)})
	wg.Go(func() {
		for range sets {
			if _, err := job.Pass(ctx); err != nil {
				errs <- err
			}
		}
	})
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < tasks; i += 4 {
				got, err := v.ResolvePinned(ctx, ids[i], 1, []*podiumv1.SecretRef{{Name: "db"}})
				if err != nil {
					errs <- err
					continue
				}
				assigned[i] = string(got[0].GetValue())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := job.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if got := value(t, v, id, false); got != assigned[i] {
			t.Fatalf("%s was assigned %q and its adoption gets %q", id, assigned[i], got)
		}
	}
}
