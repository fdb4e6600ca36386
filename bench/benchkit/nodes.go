package benchkit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/coordinator/enroll"
)

// NodePrefix names the benchmarks' nodes; their pgbench scripts build the
// same ids from a number.
const NodePrefix = "node_bench_"

// NodeID is the id of the i-th simulated node (from 1).
func NodeID(i int) string { return fmt.Sprintf("%s%06d", NodePrefix, i) }

// NodeCred is a simulated node's identity, as enrollment would give it.
type NodeCred struct{ ID, Key string }

// InsertNodes writes n enrolled nodes (ids NodeID(1)…NodeID(n)) straight into
// the table, with keys made and hashed the way Enroll makes them: enrollment
// is not what the benchmarks measure, and thousands of enrollments through the
// API would only slow the setup. maxTasks is stored as their slot count (0:
// what the node's Hello says).
func InsertNodes(ctx context.Context, conn *pgx.Conn, n int, maxTasks int32) ([]NodeCred, error) {
	creds := make([]NodeCred, n)
	ids := make([]string, n)
	hashes := make([][]byte, n)
	for i := range creds {
		key, hash := enroll.NewSecret(enroll.KeyPrefix)
		creds[i] = NodeCred{ID: NodeID(i + 1), Key: key}
		ids[i], hashes[i] = creds[i].ID, hash
	}
	_, err := conn.Exec(ctx, `insert into podium.nodes (id, key_hash, hostname, max_tasks)
		select id, h, id, $3 from unnest($1::text[], $2::bytea[]) as t(id, h)`, ids, hashes, maxTasks)
	if err != nil {
		return nil, fmt.Errorf("insert %d nodes: %w", n, err)
	}
	// Fresh statistics, so the planner sees n rows and not an empty table.
	if _, err := conn.Exec(ctx, "analyze podium.nodes"); err != nil {
		return nil, err
	}
	return creds, nil
}
