package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// refScript is the least SQL that dispatching one task can be: store it
// queued, claim the oldest queued task the way the scheduler does (its
// partial index, its order, FOR UPDATE SKIP LOCKED), and mark it scheduled on
// a node. No attempt row, no command row, no status event, no doorbell: what
// Podium does beyond this is the price of its guarantees, and the ratio of the
// two rates says what that price is.
//
// Each transaction claims at least the task it inserted (its own uncommitted
// row is visible to it and locked by no one), so \gset always gets a row.
const refScript = `\set node random(1, %d)
begin;
insert into podium.tasks (id, spec) values ('task_ref_' || lpad(nextval('bench_ref_ids')::text, 12, '0'), '{}');
select id as claimed from podium.tasks where state = 'queued'
  order by priority desc, created_at, id for update skip locked limit 1 \gset
update podium.tasks set state = 'scheduled', node_id = '%s' || lpad(:node::text, 6, '0'),
  attempt = attempt + 1, scheduled_at = now(), reason = '' where id = :claimed;
end;
`

// runPgbench runs the reference in its own database on the same server (a
// copy of the same schema, indexes included) and returns its transactions per
// second: tasks dispatched per second by raw SQL.
//
// The server runs with synchronous_commit off (pgtest's setting), which the
// coordinator's transactions get too, so commit costs the same on both sides.
func runPgbench(ctx context.Context, cluster *pgtest.Cluster, nodes, clients, threads int, d time.Duration, dir string) (float64, string, error) {
	conn, err := createDB(ctx, cluster, refDBName)
	if err != nil {
		return 0, "", err
	}
	_, err = conn.Exec(ctx, "create sequence bench_ref_ids")
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("create the reference's id sequence: %w", err)
	}
	script := filepath.Join(dir, "dispatch-ref.sql")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(refScript, nodes, benchkit.NodePrefix)), 0o644); err != nil {
		return 0, "", err
	}
	bin := filepath.Join(pgtest.BinDir, "pgbench")
	if d := os.Getenv("PODIUM_PG_BIN"); d != "" {
		bin = filepath.Join(d, "pgbench")
	}
	// pgbench is only a client, so unlike the server it runs fine as root.
	// Prepared statements, like pgx's statement cache in the coordinator.
	cmd := exec.CommandContext(ctx, bin, "-h", cluster.SocketDir, "-U", "postgres", "-n", "-M", "prepared",
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script, refDBName)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, "", fmt.Errorf("pgbench printed no tps line:\n%s", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	return tps, cmd.String(), err
}
