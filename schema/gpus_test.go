package schema_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/schema"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// 0022 adds the GPU columns placement reads; a task already waiting when it
// is applied gets them from its spec (the proto fields predate the
// columns), so an upgrade does not place it on a node without GPUs.
func TestGPUsMigrationFillsWaitingTasks(t *testing.T) {
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
	// The schema as the release before GPUs left it.
	if _, err := schema.MigrateThrough(ctx, c, "0018_autovacuum"); err != nil {
		t.Fatal(err)
	}
	for id, spec := range map[string]string{
		"task_gpu":   `{"image": "busybox", "resources": {"gpus": 2, "gpuModel": "NVIDIA H100*", "gpuMemoryMb": "80000"}}`,
		"task_plain": `{"image": "busybox", "resources": {"cpu": 1}}`,
	} {
		if _, err := c.Exec(ctx, "insert into podium.tasks (id, spec, state) values ($1, $2, 'queued')", id, spec); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := schema.Migrate(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(applied, "0022_gpus") {
		t.Fatalf("applied %v, want 0022_gpus among them", applied)
	}
	type row struct {
		gpus  int32
		model string
		mem   int64
	}
	for id, want := range map[string]row{"task_gpu": {2, "NVIDIA H100*", 80000}, "task_plain": {0, "", 0}} {
		var got row
		if err := c.QueryRow(ctx, "select gpus, gpu_model, gpu_memory_mb from podium.tasks where id = $1", id).
			Scan(&got.gpus, &got.model, &got.mem); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
	}
	// A node that reported no GPUs shows 0 of them, not null.
	if _, err := c.Exec(ctx, "insert into podium.nodes (id, key_hash) values ('node_a', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	var gpus, free int
	if err := c.QueryRow(ctx, "select gpus, free_gpus from podium.node_health where node = 'node_a'").Scan(&gpus, &free); err != nil || gpus != 0 || free != 0 {
		t.Errorf("node_health of a node without GPUs: %d GPUs, %d free (%v), want 0 and 0", gpus, free, err)
	}
}
