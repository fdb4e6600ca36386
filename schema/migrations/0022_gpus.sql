-- GPUs (issue 18). A node's GPUs as its agent last reported them, and what
-- each task asks of them, kept beside the spec as cpu and memory_mb are so
-- that claiming a queued task never reads its (possibly large) spec.
--
-- The coordinator only decides whether a node can take a task: its free GPUs
-- are those it reported that match the task's gpu_model and gpu_memory_mb,
-- less the sum of gpus over the tasks active on it. Which GPU a task gets is
-- the node's choice (by UUID), so no table here names one.
--
-- gpus is a JSON array of {"index", "uuid", "model", "memory_mb"} objects,
-- written at Hello and when a heartbeat's list differs from the last one, not
-- on every heartbeat: GPUs change only when an operator adds or removes one
-- and sends the agent SIGHUP.
alter table podium.nodes
    add column gpus jsonb not null default '[]';

alter table podium.tasks
    add column gpus          int    not null default 0,
    add column gpu_model     text   not null default '',
    add column gpu_memory_mb bigint not null default 0;

-- Tasks still waiting may have been stored with the fields before these
-- columns carried them (protobuf JSON writes int64 as strings and leaves
-- zeros and empty strings out).
update podium.tasks set
    gpus = coalesce((spec->'resources'->>'gpus')::int, 0),
    gpu_model = coalesce(spec->'resources'->>'gpuModel', ''),
    gpu_memory_mb = coalesce((spec->'resources'->>'gpuMemoryMb')::bigint, 0)
where state = 'queued' and spec->'resources' ? 'gpus';

-- node_health gains the node's GPU count and how many of them no active
-- task holds (whatever their model: a task's filters are placement's
-- business). Columns are added at the end, as create or replace view allows.
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
    n.last_heartbeat_at,
    jsonb_array_length(n.gpus)                                  as gpus,
    greatest(jsonb_array_length(n.gpus) - coalesce(t.gpus, 0), 0) as free_gpus
from podium.nodes n
left join (
    select node_id, count(*)::int as running, sum(gpus)::int as gpus
    from podium.tasks
    where state in ('scheduled', 'provisioning', 'running')
    group by node_id
) t on t.node_id = n.id;
