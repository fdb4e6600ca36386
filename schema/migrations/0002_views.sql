-- Views for admins: the fleet and the queue as people ask about them.

-- node_health is one row per enrolled node: what the watchdog decided from the
-- stored heartbeat clock, which replica holds its stream, and how busy it is.
create view podium.node_health as
select
    n.id                                                        as node,
    n.hostname,
    n.status,
    extract(epoch from now() - n.last_heartbeat_at)::bigint     as seconds_since_heartbeat,
    n.session_replica,
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

-- task_queue is every task still waiting, in the order the scheduler takes
-- them, with why it waits.
create view podium.task_queue as
select
    t.id                                          as task,
    t.priority,
    t.created_at,
    extract(epoch from now() - t.created_at)::bigint as seconds_waiting,
    t.labels,
    t.cpu,
    t.memory_mb,
    t.attempt,
    t.reason                                      as why
from podium.tasks t
where t.state = 'queued'
order by t.priority desc, t.created_at, t.id;
