package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/internal/bench/benchkit"
	"github.com/podiumhq/podium/internal/testenv/pgtest"
)

const (
	// dbName is the coordinator's database; refDBName is pgbench's, a second
	// copy of the same schema on the same server, so the reference's tasks
	// never show up in the coordinator's queue or in its statement counts.
	dbName    = "bench"
	refDBName = "bench_ref"
)

// createDB makes a fresh database from the schema template and returns a
// connection to it.
func createDB(ctx context.Context, cluster *pgtest.Cluster, name string) (*pgx.Conn, error) {
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"drop database if exists " + name + " with (force)",
		"create database " + name + " template podium_template",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return pgx.Connect(ctx, cluster.URL(name))
}

// benchDB is the coordinator's database, seen from the benchmark's own
// connection: it inserts the nodes and reads pg_stat_statements.
type benchDB struct {
	conn *pgx.Conn
}

func newBenchDB(ctx context.Context, cluster *pgtest.Cluster) (*benchDB, error) {
	conn, err := createDB(ctx, cluster, dbName)
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

// insertNodes writes n enrolled nodes with maxTasks slots each (benchkit.InsertNodes).
func (d *benchDB) insertNodes(ctx context.Context, n int, maxTasks int32) ([]benchkit.NodeCred, error) {
	return benchkit.InsertNodes(ctx, d.conn, n, maxTasks)
}

// resetStatements starts a phase's statement counts from zero.
func (d *benchDB) resetStatements(ctx context.Context) error {
	_, err := d.conn.Exec(ctx, "select pg_stat_statements_reset()")
	return err
}

type stmtStat struct {
	calls, rows int64
	ms          float64 // total execution time inside Postgres
	query       string
}

type statementStats struct {
	calls   int64   // every statement the coordinator ran
	ms      float64 // their execution time, summed
	notify  int64   // pg_notify calls (each is its own notifying commit)
	byCalls []stmtStat
	byTime  []stmtStat
}

var spaces = regexp.MustCompile(`\s+`)

// statements reads what was run in the coordinator's database since the last
// reset. The benchmark's own connection runs nothing there during a phase, so
// this is the coordinator's work (and, on a 2-core machine, it is the whole
// of it: every statement is a round trip the coordinator waited for).
func (d *benchDB) statements(ctx context.Context, top int) (statementStats, error) {
	rows, err := d.conn.Query(ctx, `select calls, rows, total_exec_time, query from pg_stat_statements
		where dbid = (select oid from pg_database where datname = current_database())
		  and query not like '%pg_stat_statements%'`)
	if err != nil {
		return statementStats{}, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	var s statementStats
	var all []stmtStat
	for rows.Next() {
		var st stmtStat
		if err := rows.Scan(&st.calls, &st.rows, &st.ms, &st.query); err != nil {
			return s, err
		}
		s.calls += st.calls
		s.ms += st.ms
		if strings.Contains(st.query, "pg_notify") {
			s.notify += st.calls
		}
		st.query = strings.TrimSpace(spaces.ReplaceAllString(st.query, " "))
		if len(st.query) > 100 {
			st.query = st.query[:100] + "…"
		}
		all = append(all, st)
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	slices.SortFunc(all, func(a, b stmtStat) int { return int(b.calls - a.calls) })
	s.byCalls = all[:min(top, len(all))]
	byTime := slices.Clone(all)
	slices.SortFunc(byTime, func(a, b stmtStat) int {
		switch {
		case a.ms > b.ms:
			return -1
		case a.ms < b.ms:
			return 1
		}
		return 0
	})
	s.byTime = byTime[:min(top, len(byTime))]
	return s, nil
}

// backends counts the coordinator's connections to its database: its pool,
// its lease connection and its listener.
func (d *benchDB) backends(ctx context.Context) (int, error) {
	var n int
	err := d.conn.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`).Scan(&n)
	return n, err
}
