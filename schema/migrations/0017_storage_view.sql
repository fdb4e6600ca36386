-- storage is where Podium's disk goes, as an admin asks about it in psql:
--
--   select * from podium.storage;
--
-- First one row per table of schema podium (kind 'table'), largest first:
-- rows is Postgres's estimate (pg_class.reltuples, as of the table's last
-- VACUUM or ANALYZE, which autovacuum runs; empty for a table never analyzed)
-- so that the view costs nothing on a table of millions of rows; bytes is the
-- table with its indexes and TOAST (pg_total_relation_size), size the same
-- for a person. Then the summary (kind 'summary'), counted exactly:
--   - database: the whole database's bytes (pg_database_size);
--   - tasks: the oldest task still kept (oldest);
--   - archive backlog: terminal tasks whose log is not archived yet
--     (0015_log_archive.sql), and the oldest of their ends;
--   - object deletions: objects queued for removal from the object store
--     (podium.object_deletions), and the oldest queued.
-- A backlog that keeps growing means its job is not keeping up, or is not
-- running (no leader, or the object store is down).
create view podium.storage as
select kind, name, rows, bytes, pg_size_pretty(bytes) as size, oldest
from (
    select 'table' as kind, c.relname::text as name,
           case when c.reltuples >= 0 then c.reltuples::bigint end as rows,
           pg_total_relation_size(c.oid) as bytes,
           null::timestamptz as oldest,
           0 as part
    from pg_catalog.pg_class c
    join pg_catalog.pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'podium' and c.relkind in ('r', 'p')
    union all
    select 'summary', 'database', null, pg_database_size(current_database()), null, 1
    union all
    select 'summary', 'tasks', null, null, (select min(created_at) from podium.tasks), 2
    union all
    select 'summary', 'archive backlog', count(*), null, min(finished_at), 3
    from podium.tasks
    where state in ('succeeded', 'failed', 'cancelled', 'lost') and log_archived_at is null
    union all
    select 'summary', 'object deletions', count(*), null, min(queued_at), 4
    from podium.object_deletions
) s
order by part, bytes desc nulls last, name;
