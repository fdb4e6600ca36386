package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/test/testenv/pgtest"
)

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
// second, tasks dispatched per second by raw SQL, and its command line.
func runPgbench(ctx context.Context, cluster *pgtest.Cluster, cfg config, dir string) (float64, string, error) {
	url, err := benchkit.CreateDB(ctx, cluster, refDBName)
	if err != nil {
		return 0, "", err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, "", err
	}
	_, err = conn.Exec(ctx, "create sequence bench_ref_ids")
	_ = conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("create the reference's id sequence: %w", err)
	}
	return benchkit.Pgbench{
		DB: refDBName, Name: "dispatch-ref.sql", Script: fmt.Sprintf(refScript, cfg.nodes, benchkit.NodePrefix),
		Clients: cfg.PgbenchClients, Threads: cfg.pgbenchThreads, Time: cfg.PgbenchTime,
	}.Run(ctx, cluster, dir)
}
