-- Retention (package coordinator/retention, a leader-only job) removes what
-- has been kept long enough, in small batches of short transactions so that
-- no lock is held for long on a busy table:
--   - a terminal task past its retention (retain_seconds, else
--     --retain-tasks) goes with everything that cascades from it, and leaves
--     a tombstone in podium.expired_tasks;
--   - a task's log past --retain-logs (events, the archive row, the attempts'
--     details) goes, and log_expired_at says when;
--   - a task's artifacts past --retain-artifacts go, and artifacts_expired_at
--     says when;
--   - tokens, delivered commands and audit rows past theirs go too.
-- Every object the removed rows named (an artifact's object_key, a task's
-- log_archive_key) is queued in podium.object_deletions by the same
-- statement (0015_log_archive.sql), and the sweeper removes it from the store.

-- retain_seconds is the spec's retain (TaskSpec.retain_seconds), kept beside
-- the spec as timeout_seconds is so that the job's SQL reads a column, not
-- the spec: 0 means the coordinator's --retain-tasks.
alter table podium.tasks
    add column retain_seconds       bigint not null default 0 check (retain_seconds >= 0),
    add column log_expired_at       timestamptz,
    add column artifacts_expired_at timestamptz;

-- expired_tasks are tombstones: a task that retention removed, and when, so
-- that `podium task get` of it says "expired by retention on DATE" instead of
-- a "not found" that reads like a typo. They are a few dozen bytes each and
-- are themselves trimmed after --retain-audit.
create table podium.expired_tasks (
    id         text primary key,
    expired_at timestamptz not null default now()
);
create index expired_tasks_at on podium.expired_tasks (expired_at);

-- plus_seconds is finished_at + retain_seconds, declared immutable so that an
-- index can hold it: timestamptz + interval is only stable in general,
-- because adding days or months depends on the time zone, but an interval of
-- seconds alone is the same instant everywhere.
create function podium.plus_seconds(at timestamptz, seconds bigint) returns timestamptz
    language sql immutable parallel safe
    return at + make_interval(secs => seconds);

-- The job's queues, oldest first. Each is partial on terminal tasks, so a
-- queued or running task is in none of them, and the job's scan stops at the
-- first row not yet due instead of walking rows it must skip. None names
-- last_seq, which ingest updates per event: those updates stay HOT
-- (0005_fillfactor.sql). finished_at, retain_seconds and the *_expired_at
-- columns change once or never in a task's life.
create index tasks_expiry on podium.tasks (finished_at)
    where state in ('succeeded', 'failed', 'cancelled', 'lost') and retain_seconds = 0;
create index tasks_expiry_own on podium.tasks (podium.plus_seconds(finished_at, retain_seconds))
    where state in ('succeeded', 'failed', 'cancelled', 'lost') and retain_seconds > 0;
create index tasks_log_expiry on podium.tasks (finished_at)
    where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_expired_at is null;

-- Artifacts expire by when they were stored.
create index artifacts_created on podium.artifacts (created_at);

-- Delivered commands are done with an hour after delivery.
create index node_commands_delivered on podium.node_commands (delivered_at)
    where delivered_at is not null;
