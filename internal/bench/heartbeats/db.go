package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

const (
	dbName = "bench"
	// heartbeatSQL is a fragment of the coordinator's batched heartbeat UPDATE
	// (store.FlushHeartbeats), how its row in pg_stat_statements is found.
	heartbeatSQL = "last_heartbeat_at = h.at"
)

// benchDB is the database of one node count, made fresh from the schema
// template so every count starts from the same empty tables.
type benchDB struct {
	conn *pgx.Conn
}

func newBenchDB(ctx context.Context, cluster *pgtest.Cluster) (*benchDB, error) {
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"drop database if exists " + dbName + " with (force)",
		"create database " + dbName + " template podium_template",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	conn, err := pgx.Connect(ctx, cluster.URL(dbName))
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "create extension pg_stat_statements"); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return &benchDB{conn: conn}, nil
}

func (d *benchDB) close() { _ = d.conn.Close(context.Background()) }

// insertNodes writes n enrolled nodes (benchkit.InsertNodes).
func (d *benchDB) insertNodes(ctx context.Context, n int) ([]benchkit.NodeCred, error) {
	return benchkit.InsertNodes(ctx, d.conn, n, 0)
}

// resetStatements starts the window's statement counts from zero.
func (d *benchDB) resetStatements(ctx context.Context) error {
	_, err := d.conn.Exec(ctx, "select pg_stat_statements_reset()")
	return err
}

type stmtStat struct {
	calls, rows int64
	query       string
}

type statementStats struct {
	hbCalls, hbRows int64
	allCalls        int64
	top             []stmtStat
}

var spaces = regexp.MustCompile(`\s+`)

// statements reads what the coordinator ran in this database since the reset:
// the heartbeat flush on its own, every statement together, and the most
// frequent ones (whatever the replica does per node per second shows up there).
func (d *benchDB) statements(ctx context.Context) (statementStats, error) {
	rows, err := d.conn.Query(ctx, `select calls, rows, query from pg_stat_statements
		where dbid = (select oid from pg_database where datname = current_database())
		  and query not like '%pg_stat_statements%'
		order by calls desc`)
	if err != nil {
		return statementStats{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	var s statementStats
	for rows.Next() {
		var st stmtStat
		if err := rows.Scan(&st.calls, &st.rows, &st.query); err != nil {
			return s, err
		}
		s.allCalls += st.calls
		if strings.Contains(st.query, heartbeatSQL) {
			s.hbCalls += st.calls
			s.hbRows += st.rows
		}
		if len(s.top) < 8 {
			st.query = strings.TrimSpace(spaces.ReplaceAllString(st.query, " "))
			if len(st.query) > 90 {
				st.query = st.query[:90] + "…"
			}
			s.top = append(s.top, st)
		}
	}
	return s, rows.Err()
}

// staleNodes counts the benchmark's nodes whose stored clock is older than
// after (the watchdog would soon call them unreachable), and those whose
// status is not online.
func (d *benchDB) staleNodes(ctx context.Context, after time.Duration) (stale, notOnline int, err error) {
	err = d.conn.QueryRow(ctx, `select
			count(*) filter (where last_heartbeat_at is null or last_heartbeat_at < now() - make_interval(secs => $2)),
			count(*) filter (where status <> 'online')
		from podium.nodes where starts_with(id, $1)`, benchkit.NodePrefix, after.Seconds()).Scan(&stale, &notOnline)
	return stale, notOnline, err
}

// backends counts the other connections to the database: the coordinator's
// pool, its lease connection and its listener.
func (d *benchDB) backends(ctx context.Context) (int, error) {
	var n int
	err := d.conn.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`).Scan(&n)
	return n, err
}
