-- session_replica in node_health said a replica held a node's stream for as
-- long as the node's row said so, and a replica that died without ending its
-- sessions (SIGKILL, a lost machine) left its name there until the node came
-- back. The truth is the node's advisory lock (lease.NodeKey), which the
-- holding replica keeps on its lease connection for as long as the session is
-- real and which Postgres drops with the connection. session_lock is that
-- key, written when the session starts; the view shows the replica only while
-- some connection holds the lock. pg_locks is readable by every role, so the
-- view is as true for an admin's role as for the coordinator's.
alter table podium.nodes add column session_lock bigint;

-- An advisory lock on a bigint key shows in pg_locks as classid = the high 32
-- bits, objid = the low 32 bits, objsubid = 1.
create or replace view podium.node_health as
select
    n.id                                                        as node,
    n.hostname,
    n.status,
    extract(epoch from now() - n.last_heartbeat_at)::bigint     as seconds_since_heartbeat,
    case when exists (
        select 1 from pg_catalog.pg_locks l
        where l.locktype = 'advisory' and l.granted and l.objsubid = 1
          and l.database = (select oid from pg_catalog.pg_database where datname = current_database())
          and l.classid::bigint = ((n.session_lock >> 32) & 4294967295)
          and l.objid::bigint = (n.session_lock & 4294967295)
    ) then n.session_replica end                                as session_replica,
    greatest(case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end
             - coalesce(t.running, 0), 0)
        * (not n.draining)::int                                 as free_slots,
    coalesce(t.running, 0)                                      as running_tasks,
    n.draining,
    n.labels,
    n.last_heartbeat_at
from podium.nodes n
left join (
    select node_id, count(*)::int as running
    from podium.tasks
    where state in ('scheduled', 'provisioning', 'running')
    group by node_id
) t on t.node_id = n.id;
