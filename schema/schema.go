// Package schema owns Podium's Postgres schema: the migrations and the views
// admins read. They are embedded in the coordinator and applied at start under an
// advisory lock, so several replicas starting at once apply each migration once.
package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrateLock is the advisory lock key that serialises migrations across
// replicas. It is an arbitrary constant that nothing else in Podium uses.
const migrateLock int64 = 0x706f6469756d01 // "podium" + 1

// Migration is one forward-only step.
type Migration struct {
	Version string
	SQL     string
}

// Migrations lists the embedded migrations in the order they apply.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := migrations.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: strings.TrimSuffix(e.Name(), ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies every migration the database has not seen, each in its own
// transaction, holding a session advisory lock for the whole run. It needs a
// direct connection: behind PgBouncer in transaction mode a session lock is not
// held across statements.
func Migrate(ctx context.Context, conn *pgx.Conn) (applied []string, err error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	return migrate(ctx, conn, ms)
}

// MigrateThrough is Migrate stopped after the migration named last (e.g.
// "0006_node_limits"): the schema an earlier release left behind, which the
// upgrade tests start from. A name that is not a migration is an error.
func MigrateThrough(ctx context.Context, conn *pgx.Conn, last string) (applied []string, err error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	for i, m := range ms {
		if m.Version == last {
			return migrate(ctx, conn, ms[:i+1])
		}
	}
	return nil, fmt.Errorf("schema: no migration %q: name one of schema/migrations without .sql", last)
}

func migrate(ctx context.Context, conn *pgx.Conn, ms []Migration) (applied []string, err error) {
	if _, err := conn.Exec(ctx, "select pg_advisory_lock($1)", migrateLock); err != nil {
		return nil, fmt.Errorf("schema: take the migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the caller's may be what ended, and the lock must go.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "select pg_advisory_unlock($1)", migrateLock)
	}()
	if _, err := conn.Exec(ctx, `create schema if not exists podium;
		create table if not exists podium.schema_migrations (
			version text primary key,
			applied_at timestamptz not null default now())`); err != nil {
		return nil, fmt.Errorf("schema: create the migrations table: %w", err)
	}
	for _, m := range ms {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return applied, err
		}
		var done bool
		if err := tx.QueryRow(ctx, "select exists(select 1 from podium.schema_migrations where version = $1)", m.Version).Scan(&done); err != nil {
			_ = tx.Rollback(ctx)
			return applied, err
		}
		if done {
			_ = tx.Rollback(ctx)
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			_ = tx.Rollback(ctx)
			return applied, fmt.Errorf("schema: migration %s: %w", m.Version, err)
		}
		if _, err := tx.Exec(ctx, "insert into podium.schema_migrations (version) values ($1)", m.Version); err != nil {
			_ = tx.Rollback(ctx)
			return applied, err
		}
		if err := tx.Commit(ctx); err != nil {
			return applied, fmt.Errorf("schema: commit migration %s: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// Unknown lists the migrations the database has applied that this build
// does not have: a newer release migrated it. A build of the release before
// that one runs on such a schema during a rolling upgrade, since the
// migrations between releases only add; an older one is not supported.
func Unknown(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	known := make([]string, len(ms))
	for i, m := range ms {
		known[i] = m.Version
	}
	rows, err := conn.Query(ctx, "select version from podium.schema_migrations where version <> all($1) order by version", known)
	if err != nil {
		return nil, fmt.Errorf("schema: read the applied migrations: %w", err)
	}
	unknown, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("schema: read the applied migrations: %w", err)
	}
	return unknown, nil
}
