package benchkit

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/podiumhq/podium/test/testenv/pgtest"
)

// CreateDB makes a fresh database called name from the cluster's schema
// template (dropping one left by an earlier round) and returns its URL: each
// measurement starts from the same empty tables.
func CreateDB(ctx context.Context, cluster *pgtest.Cluster, name string) (string, error) {
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to Postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"drop database if exists " + name + " with (force)",
		"create database " + name + " template podium_template",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	return cluster.URL(name), nil
}

// StatsDB is a coordinator's database seen from the benchmark's own
// connection: it inserts the nodes and reads pg_stat_statements, which needs
// a cluster started with shared_preload_libraries=pg_stat_statements (Setup's).
type StatsDB struct {
	Conn *pgx.Conn
	URL  string // for the coordinator
}

// OpenStatsDB makes the database called name fresh (CreateDB) and turns on
// pg_stat_statements in it.
func OpenStatsDB(ctx context.Context, cluster *pgtest.Cluster, name string) (*StatsDB, error) {
	url, err := CreateDB(ctx, cluster, name)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "create extension pg_stat_statements"); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return &StatsDB{Conn: conn, URL: url}, nil
}

func (d *StatsDB) Close() { _ = d.Conn.Close(context.Background()) }

// InsertNodes writes n enrolled nodes with maxTasks slots each (see the
// function InsertNodes).
func (d *StatsDB) InsertNodes(ctx context.Context, n int, maxTasks int32) ([]NodeCred, error) {
	return InsertNodes(ctx, d.Conn, n, maxTasks)
}

// ResetStatements starts the statement counts from zero, at the start of a
// window.
func (d *StatsDB) ResetStatements(ctx context.Context) error {
	_, err := d.Conn.Exec(ctx, "select pg_stat_statements_reset()")
	return err
}

// Statement is one normalised statement's counts since the last reset.
type Statement struct {
	Calls, Rows int64
	Ms          float64 // total execution time inside Postgres
	Query       string  // whitespace collapsed
}

// Short is the query cut to fit a report's line.
func (s Statement) Short() string {
	if len(s.Query) > 100 {
		return s.Query[:100] + "…"
	}
	return s.Query
}

var spaces = regexp.MustCompile(`\s+`)

// Statements reads what was run in the database since the last reset, most
// called first. The benchmark's own connection runs nothing there during a
// window, so this is the coordinator's work (and, on a small machine, most of
// its cost: every statement is a round trip the coordinator waited for).
func (d *StatsDB) Statements(ctx context.Context) ([]Statement, error) {
	rows, err := d.Conn.Query(ctx, `select calls, rows, total_exec_time, query from pg_stat_statements
		where dbid = (select oid from pg_database where datname = current_database())
		  and query not like '%pg_stat_statements%'`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	var all []Statement
	for rows.Next() {
		var st Statement
		if err := rows.Scan(&st.Calls, &st.Rows, &st.Ms, &st.Query); err != nil {
			return nil, err
		}
		st.Query = strings.TrimSpace(spaces.ReplaceAllString(st.Query, " "))
		all = append(all, st)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b Statement) int { return int(b.Calls - a.Calls) })
	return all, nil
}

// Backends counts the other connections to the database: the coordinator's
// pool, its lease connection and its listener.
func (d *StatsDB) Backends(ctx context.Context) (int, error) {
	var n int
	err := d.Conn.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`).Scan(&n)
	return n, err
}
