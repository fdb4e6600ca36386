package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/podiumhq/podium/bench/benchkit"
)

const (
	dbName = "bench"
	// heartbeatSQL is a fragment of the coordinator's batched heartbeat UPDATE
	// (store.FlushHeartbeats), how its row in pg_stat_statements is found.
	heartbeatSQL = "last_heartbeat_at = h.at"
	// flushSQL opens every heartbeat flush's transaction and nothing else's:
	// its calls count the flushes.
	flushSQL = "set local synchronous_commit = off"
)

// statementStats is what one window's statements say: the heartbeat flush on
// its own, every statement together, and the most frequent ones (whatever the
// replica does per node per second shows up there).
type statementStats struct {
	hbCalls, hbRows int64
	flushes         int64
	allCalls        int64
	top             []benchkit.Statement
}

func statements(ctx context.Context, db *benchkit.StatsDB) (statementStats, error) {
	all, err := db.Statements(ctx)
	if err != nil {
		return statementStats{}, err
	}
	s := statementStats{top: all[:min(8, len(all))]}
	for _, st := range all {
		s.allCalls += st.Calls
		if strings.Contains(st.Query, heartbeatSQL) {
			s.hbCalls += st.Calls
			s.hbRows += st.Rows
		}
		if strings.Contains(st.Query, flushSQL) {
			s.flushes += st.Calls
		}
	}
	return s, nil
}

// staleNodes counts the benchmark's nodes whose stored clock is older than
// after (the watchdog would soon call them unreachable), and those whose
// status is not online.
func staleNodes(ctx context.Context, db *benchkit.StatsDB, after time.Duration) (stale, notOnline int, err error) {
	err = db.Conn.QueryRow(ctx, `select
			count(*) filter (where last_heartbeat_at is null or last_heartbeat_at < now() - make_interval(secs => $2)),
			count(*) filter (where status <> 'online')
		from podium.nodes where starts_with(id, $1)`, benchkit.NodePrefix, after.Seconds()).Scan(&stale, &notOnline)
	if err != nil {
		return 0, 0, fmt.Errorf("count stale nodes: %w", err)
	}
	return stale, notOnline, nil
}

// naiveHeartbeat is the pgbench reference: the naive alternative to
// batching, one autocommitted UPDATE per heartbeat for a random one of the n
// nodes, as fast as the clients can go. Its rate is the ceiling a coordinator
// writing heartbeats one by one would hit on this machine, beside which N/10
// rows/s (what the fleet needs) and the coordinator's ~1 statement/s are read.
func naiveHeartbeat(n, clients int, d time.Duration) benchkit.Pgbench {
	return benchkit.Pgbench{
		DB: dbName, Name: "naive-heartbeat.sql", Clients: clients, Threads: min(clients, 2), Time: d,
		Script: fmt.Sprintf("\\set n random(1, %d)\n"+
			"update podium.nodes set last_heartbeat_at = now() where id = '%s' || lpad(:n::text, 6, '0');\n", n, benchkit.NodePrefix),
	}
}
