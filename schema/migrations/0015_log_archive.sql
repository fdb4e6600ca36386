-- A terminal task's log leaves podium.task_events once it is archived: the
-- events up to log_archived_seq are one zstd-compressed object in the object
-- store (log_archive_key, with its size and SHA-256), or, where no object store
-- is configured, one compressed row of podium.task_log_archives. Rows of
-- task_events past log_archived_seq (a note written after the archive) stay
-- rows until the next pass, so a reader takes the archive up to
-- log_archived_seq and the table after it: the archive and the rows never
-- both hold an event, and there is no moment when neither does.
alter table podium.tasks
    add column log_archived_seq   bigint not null default 0,
    add column log_archive_key    text,
    add column log_archive_size   bigint,
    add column log_archive_sha256 text,
    add column log_archived_at    timestamptz;

create table podium.task_log_archives (
    task_id text primary key references podium.tasks (id) on delete cascade,
    data    bytea not null
);

-- object_deletions are objects the database no longer names, queued in the
-- same transaction that stopped naming them (an archive replaced, a task or
-- an artifact expired) and removed from the store by a leader-only sweeper.
-- Removing the object first would leave a row naming nothing if the
-- transaction failed; removing it after commit would leak it if the replica
-- died in between.
create table podium.object_deletions (
    key       text primary key,
    queued_at timestamptz not null default now()
);

-- The archive job's queue: terminal tasks whose log is not (or no longer
-- wholly) archived, by when they ended. log_archived_at is null until the
-- archive is written, and is set back to null by anything that appends to an
-- archived task's log, so the job folds the new rows into a new archive. The
-- predicate names no column that ingest updates per event (last_seq): it
-- keeps those updates HOT (0005_fillfactor.sql).
create index tasks_archive_backlog on podium.tasks (finished_at)
    where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_archived_at is null;
