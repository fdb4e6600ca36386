package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/store"
)

// Each retention statement can find what is due through an index of its own
// (schema/migrations/0016_retention.sql): with the predicate of a partial
// index changed on one side only, Postgres would fall back to reading the
// whole table on every pass, which on a year of tasks is the long statement
// the job exists to avoid. Sequential scans are switched off so that the
// plan shows whether the index can be used at all, whatever the table's size.
func TestRetentionStatementsUseTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := openStore(t)
	pool := rawSQL(t, db)
	for name, indexes := range map[string][]string{
		"tasks":      {"tasks_expiry", "tasks_expiry_own"},
		"logs":       {"tasks_log_expiry"},
		"artifacts":  {"artifacts_created"},
		"commands":   {"node_commands_delivered", "node_commands_pending"},
		"audit":      {"audit_log_at_idx"},
		"tombstones": {"expired_tasks_at"},
	} {
		var plan strings.Builder
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "set local enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "explain "+store.RetentionSQL[name], 3600.0, 500)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			plan.WriteString(strings.Join(lines, "\n"))
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, ix := range indexes {
			if p := plan.String(); !strings.Contains(p, "using "+ix+" on ") && !strings.Contains(p, "Bitmap Index Scan on "+ix+" ") {
				t.Errorf("the %s statement does not use %s:\n%s", name, ix, plan.String())
			}
		}
	}
}
