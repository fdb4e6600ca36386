package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The retention job's statements (package coordinator/retention decides when
// and how much; schema/migrations/0016_retention.sql says what each column is
// for). Each removes at most one batch, oldest first, in one statement and so
// one short transaction: rows are claimed FOR UPDATE SKIP LOCKED, so the job
// never waits on a row ingest or the archive job holds, and they never wait
// long on it. Every object key the removed rows name is queued in
// podium.object_deletions by the same statement: there is no moment when a
// key is neither named by a row nor queued.

// terminalSQL is the terminal states as the partial indexes of 0016 name
// them: a query must repeat the predicate for Postgres to use them.
const terminalSQL = `('succeeded', 'failed', 'cancelled', 'lost')`

// expireTasksSQL removes the terminal tasks past their retention: those with
// no retain of their own ended more than $1 seconds ago (--retain-tasks),
// those with one ended more than their retain_seconds ago. Each is read
// through its own index (tasks_expiry, tasks_expiry_own), oldest first. The
// delete cascades to the task's attempts, events, artifacts and archive row;
// the tombstone says when it went.
const expireTasksSQL = `with
	due_global as (
		select id from podium.tasks
		where state in ` + terminalSQL + ` and retain_seconds = 0
			and finished_at < now() - make_interval(secs => $1)
		order by finished_at limit $2
		for update skip locked),
	due_own as (
		select id from podium.tasks
		where state in ` + terminalSQL + ` and retain_seconds > 0
			and podium.plus_seconds(finished_at, retain_seconds) < now()
		order by podium.plus_seconds(finished_at, retain_seconds) limit $2
		for update skip locked),
	due as (select id from due_global union all select id from due_own),
	keys as (
		insert into podium.object_deletions (key)
		select a.object_key from podium.artifacts a join due on a.task_id = due.id
		union
		select t.log_archive_key from podium.tasks t join due on t.id = due.id
		where t.log_archive_key is not null
		on conflict (key) do nothing),
	tombs as (
		insert into podium.expired_tasks (id) select id from due
		on conflict (id) do nothing),
	gone as (delete from podium.tasks t using due where t.id = due.id returning t.id)
	select count(*) from gone`

// ExpireTasks removes up to limit tasks past their retention (keep when the
// task gives none) and every row that hangs off them, leaves their
// tombstones and queues their objects, and says how many went.
func (s *Store) ExpireTasks(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireTasksSQL, keep.Seconds(), limit)
}

// expireLogsSQL removes the logs of terminal tasks that ended more than $1
// seconds ago: their event rows and their archive (the row, or the object,
// queued). The task row stays, with log_expired_at set; the archive columns
// are cleared and log_archived_at set if it was not, so the archive job
// (whose queue is log_archived_at is null) has nothing left to do for it.
// The attempts' rows stay too: they hold what each attempt used (podium.usage,
// 0020_usage.sql), which is worth keeping as long as the task; they go with
// it, a few dozen bytes each.
const expireLogsSQL = `with
	due as (
		select id, log_archive_key from podium.tasks
		where state in ` + terminalSQL + ` and log_expired_at is null
			and finished_at < now() - make_interval(secs => $1)
		order by finished_at limit $2
		for update skip locked),
	keys as (
		insert into podium.object_deletions (key)
		select log_archive_key from due where log_archive_key is not null
		on conflict (key) do nothing),
	events as (delete from podium.task_events e using due where e.task_id = due.id),
	archives as (delete from podium.task_log_archives a using due where a.task_id = due.id),
	marked as (
		update podium.tasks t set log_expired_at = now(),
			log_archive_key = null, log_archive_size = null, log_archive_sha256 = null,
			log_archived_at = coalesce(t.log_archived_at, now())
		from due where t.id = due.id
		returning t.id)
	select count(*) from marked`

// ExpireLogs removes the logs of up to limit tasks that ended more than keep
// ago, and says how many.
func (s *Store) ExpireLogs(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireLogsSQL, keep.Seconds(), limit)
}

// expireArtifactsSQL removes the artifacts of terminal tasks stored more than
// $1 seconds ago, queues their objects and marks their tasks. A running
// task's artifacts wait for it to end.
const expireArtifactsSQL = `with
	due as (
		select a.id, a.task_id, a.object_key from podium.artifacts a
		where a.created_at < now() - make_interval(secs => $1)
			and exists (select 1 from podium.tasks t where t.id = a.task_id and t.state in ` + terminalSQL + `)
		order by a.created_at limit $2
		for update skip locked),
	keys as (
		insert into podium.object_deletions (key) select object_key from due
		on conflict (key) do nothing),
	gone as (delete from podium.artifacts a using due where a.id = due.id returning a.task_id),
	marked as (
		update podium.tasks t set artifacts_expired_at = now()
		where t.id in (select task_id from due) and t.artifacts_expired_at is null)
	select count(*) from gone`

// ExpireArtifacts removes up to limit artifacts stored more than keep ago
// (of tasks that have ended), and says how many.
func (s *Store) ExpireArtifacts(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireArtifactsSQL, keep.Seconds(), limit)
}

// expireTokensSQL removes enrollment tokens that can no longer enroll
// anything, $1 seconds after they stopped being able to: used that long ago,
// or expired unused that long ago. Until then, who used a token can still be
// looked up, and enrolling with an expired one says "expired", not "not
// known".
const expireTokensSQL = `with gone as (
	delete from podium.enrollment_tokens where token_hash in (
		select token_hash from podium.enrollment_tokens
		where (used_at is null and expires_at < now() - make_interval(secs => $1)) or used_at < now() - make_interval(secs => $1)
		limit $2)
	returning 1)
	select count(*) from gone`

// ExpireTokens removes up to limit enrollment tokens used, or expired
// unused, more than keep ago, and says how many.
func (s *Store) ExpireTokens(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireTokensSQL, keep.Seconds(), limit)
}

// expireCommandsSQL removes node commands that are done with: delivered more
// than $1 seconds ago, or never delivered but about a task that is gone or
// ended more than $1 seconds ago (an assign or cancel for a node that never
// came back). A node's own commands (config), undelivered, wait for it.
const expireCommandsSQL = `with
	delivered as (
		select id from podium.node_commands
		where delivered_at is not null and delivered_at < now() - make_interval(secs => $1)
		order by delivered_at limit $2),
	stale as (
		select c.id from podium.node_commands c
		where c.delivered_at is null and c.task_id <> '' and c.created_at < now() - make_interval(secs => $1)
			and not exists (select 1 from podium.tasks t where t.id = c.task_id
				and (t.state not in ` + terminalSQL + ` or t.finished_at >= now() - make_interval(secs => $1)))
		limit $2),
	gone as (
		delete from podium.node_commands where id in (select id from delivered union select id from stale)
		returning 1)
	select count(*) from gone`

// ExpireCommands removes up to limit node commands done with more than keep
// ago (twice that when both kinds are due), and says how many.
func (s *Store) ExpireCommands(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireCommandsSQL, keep.Seconds(), limit)
}

const expireAuditSQL = `with gone as (
	delete from podium.audit_log where id in (
		select id from podium.audit_log where at < now() - make_interval(secs => $1)
		order by at limit $2)
	returning 1)
	select count(*) from gone`

// ExpireAudit removes up to limit audit rows older than keep, and says how
// many.
func (s *Store) ExpireAudit(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireAuditSQL, keep.Seconds(), limit)
}

const expireTombstonesSQL = `with gone as (
	delete from podium.expired_tasks where id in (
		select id from podium.expired_tasks where expired_at < now() - make_interval(secs => $1)
		order by expired_at limit $2)
	returning 1)
	select count(*) from gone`

// ExpireTombstones removes up to limit tombstones of tasks expired more than
// keep ago (after that, reading such a task says "not found"), and says how
// many.
func (s *Store) ExpireTombstones(ctx context.Context, keep time.Duration, limit int) (int, error) {
	return s.countOne(ctx, expireTombstonesSQL, keep.Seconds(), limit)
}

func (s *Store) countOne(ctx context.Context, sql string, args ...any) (int, error) {
	var n int64
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return int(n), err
}

// TaskExpiredAt says when retention removed a task, and ErrNotFound when
// there is no tombstone for it (it never existed, or expired so long ago
// that its tombstone went too).
func (s *Store) TaskExpiredAt(ctx context.Context, id string) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, "select expired_at from podium.expired_tasks where id = $1", id).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, ErrNotFound
	}
	return at, err
}

// QueuedDeletions returns up to limit object keys queued for removal from
// the object store, in key order: the primary key's, so reading a batch
// costs the same however long the queue has grown while the store was down.
func (s *Store) QueuedDeletions(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, "select key from podium.object_deletions order by key limit $1", limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// DeletionsDone drops keys from the queue once their objects are gone from
// the store.
func (s *Store) DeletionsDone(ctx context.Context, keys []string) error {
	_, err := s.pool.Exec(ctx, "delete from podium.object_deletions where key = any($1)", keys)
	return err
}

// StorageRow is a row of the podium.storage view (0017_storage_view.sql).
type StorageRow struct {
	Kind, Name string
	Rows       *int64
	Bytes      *int64
	Size       *string
	Oldest     *time.Time
}

// Storage reads podium.storage: where the database's disk goes.
func (s *Store) Storage(ctx context.Context) ([]StorageRow, error) {
	rows, err := s.pool.Query(ctx, "select kind, name, rows, bytes, size, oldest from podium.storage")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StorageRow, error) {
		var sr StorageRow
		err := r.Scan(&sr.Kind, &sr.Name, &sr.Rows, &sr.Bytes, &sr.Size, &sr.Oldest)
		return sr, err
	})
}
