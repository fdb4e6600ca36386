// Package store is the coordinator's only door to Postgres. Every table Podium
// keeps is read and written here, so the rules that make several replicas safe
// (one transition function with an explicit allowed-from set, idempotent event
// ingest, epoch-checked writes for a node) live in one place. Policy does not:
// which node a task goes to is package placement's rule, which the store
// only asks (DispatchPass) and whose Cost it keeps on the task's row.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors callers branch on.
var (
	ErrNotFound     = errors.New("store: not found")
	ErrTokenUnknown = errors.New("enrollment token is not known: create one with `podium token create`")
	ErrTokenUsed    = errors.New("enrollment token was already used: tokens are single use, create a new one with `podium token create`")
	ErrTokenExpired = errors.New("enrollment token has expired: create a new one with `podium token create`")
	// ErrStaleEpoch means a replica tried to write for a node whose stream has
	// since moved to a newer session; the write was not made.
	ErrStaleEpoch = errors.New("store: the node's session has moved on (stale epoch)")
)

// Store is the coordinator's connection pool behind methods. The pool is
// unexported on purpose: a statement written elsewhere would skip the epoch
// checks and the transition rule that keep replicas from undoing each other's
// work, and nobody reading the store would know it exists.
type Store struct {
	pool *pgxpool.Pool
}

// Open connects to Postgres and checks that it answers.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	// The hot statements take whole batches as arrays (unnest($1), any($1)).
	// A generic plan, which Postgres settles on after a few runs of a
	// prepared statement, cannot know how long the arrays are and was made
	// when the tables were small; it chose sequential scans that got slower
	// as the tables grew (3.6 ms for a one-row dispatch at 30,000 tasks). A
	// custom plan sees the array and the table as they are; planning these
	// statements costs far less than one such scan.
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	tuneConn(&cfg.ConnConfig.Config)
	setDefault(&cfg.ConnConfig.Config, "idle_in_transaction_session_timeout", strconv.Itoa(int(idleInTransaction/time.Millisecond)))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach Postgres at %s: %w", redactURL(cfg.ConnConfig), err)
	}
	return &Store{pool: pool}, nil
}

// ConnectDirect opens one connection of its own to the database at url, for
// what cannot share the pool: the lease's session advisory locks, the bus's
// LISTEN and the migrator. The URL's pool settings (pool_max_conns and the
// other pool_ parameters, which size the pool Open makes) are left out: sent
// as they are, Postgres would refuse them as unknown settings, and a URL an
// operator wrote to size the pool would stop the replica from starting.
//
// Like the pool's, the connection finds a silent peer in seconds (tuneConn).
// settings are session settings ("name", "value", ...) the URL does not
// override, e.g. the lease's idle_session_timeout.
func ConnectDirect(ctx context.Context, url string, settings ...string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	tuneConn(&cfg.ConnConfig.Config)
	for i := 0; i+1 < len(settings); i += 2 {
		setDefault(&cfg.ConnConfig.Config, settings[i], settings[i+1])
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// PoolSize is the most connections the pool opens (pool_max_conns in the
// database URL; pgxpool's default, the larger of 4 and the CPUs, without).
func (s *Store) PoolSize() int32 { return s.pool.Config().MaxConns }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that Postgres answers on a pooled connection, for readiness: a
// replica whose database is away can serve nothing, and should be taken out
// of rotation rather than sent work.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func redactURL(c *pgx.ConnConfig) string {
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", c.Host, c.Port, c.Database, c.User)
}

// querier is what both a pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// inTx runs fn in a transaction, committing when it returns nil. It is
// unexported like the pool: a transaction handed outside the store would be a
// second door to the tables.
//
// When ctx carries an audit row (WithAudit), the transaction writes it too,
// after fn succeeds: the change and its audit row commit together or not at
// all.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return auditInTx(ctx, tx)
	})
}

// Notify rings a doorbell. It is deliberately its own statement, outside any
// transaction that did the work: Postgres serialises notifying commits on one
// cluster-wide lock, so hot paths commit first and ring after.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	_, err := s.pool.Exec(ctx, "select pg_notify($1, $2)", channel, payload)
	return err
}

// NotifyMany rings several doorbells in one statement, so one notifying commit
// takes the cluster-wide notify lock once for a whole dispatch pass.
func (s *Store) NotifyMany(ctx context.Context, channels, payloads []string) error {
	_, err := s.pool.Exec(ctx, "select pg_notify(c, p) from unnest($1::text[], $2::text[]) as n(c, p)", channels, payloads)
	return err
}
