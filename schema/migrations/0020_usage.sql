-- Usage accounting: what each attempt used, and podium.usage, the sums an
-- admin asks for (docs/operations.md, "Usage").
--
-- cpu_seconds, peak_memory_bytes and wall_seconds come with the terminal
-- status the node reports (StatusChange.usage), bounded by the node and again
-- by the coordinator; null is unknown (the cgroup could not be read, the node
-- reported nothing, or what it reported was refused), never 0. output_bytes
-- and artifact_bytes the coordinator counts itself as it stores the attempt's
-- output and artifacts, so no node or task can forge them. Adding columns
-- with constant defaults rewrites nothing on Postgres 11 and later.
alter table podium.attempts
    add column cpu_seconds       double precision check (cpu_seconds >= 0),
    add column peak_memory_bytes bigint check (peak_memory_bytes >= 0),
    add column wall_seconds      double precision check (wall_seconds >= 0),
    add column output_bytes      bigint not null default 0 check (output_bytes >= 0),
    add column artifact_bytes    bigint not null default 0 check (artifact_bytes >= 0);

-- usage sums the attempts that ended by the day they ended (UTC), the user who
-- submitted the task (requested_by) and each of the task's labels, with one
-- more row per user and day whose label is null: the user's total of that
-- day, every task once, labelled or not.
--
--   select requested_by, sum(cpu_seconds) from podium.usage
--     where label is null and day > current_date - 7 group by 1;
--   select day, cpu_seconds from podium.usage where label = 'gpu';
--
-- A task with several labels counts under each of them, so add up the rows
-- of one label, or the totals (label null), never every row. cpu_seconds,
-- wall_seconds, output_bytes and artifact_bytes are sums; peak_memory_bytes
-- is the highest peak of the group (a sum of peaks means nothing). The sums
-- leave out what is unknown; attempts_cpu_unknown counts the attempts whose
-- CPU time is, so a partial sum says it is one. Usage lives on the
-- attempts, so it goes when retention removes the task.
create view podium.usage as
with ended as (
    select (a.finished_at at time zone 'UTC')::date as day, t.requested_by, t.labels,
           a.cpu_seconds, a.wall_seconds, a.peak_memory_bytes, a.output_bytes, a.artifact_bytes
    from podium.attempts a
    join podium.tasks t on t.id = a.task_id
    where a.finished_at is not null
)
select day, requested_by, label,
       count(*)::bigint                                      as attempts,
       count(*) filter (where cpu_seconds is null)::bigint   as attempts_cpu_unknown,
       coalesce(sum(cpu_seconds), 0)::float8                 as cpu_seconds,
       coalesce(sum(wall_seconds), 0)::float8                as wall_seconds,
       max(peak_memory_bytes)                                as peak_memory_bytes,
       sum(output_bytes)::bigint                             as output_bytes,
       sum(artifact_bytes)::bigint                           as artifact_bytes
from (
    select e.*, l.label from ended e cross join lateral unnest(e.labels) as l(label)
    union all
    select e.*, null::text from ended e
) x
group by day, requested_by, label;
