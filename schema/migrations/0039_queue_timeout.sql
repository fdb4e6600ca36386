-- Unschedulable, and a queue timeout.
--
-- unschedulable is set by the dispatch pass while a queued task is one no
-- enrolled node could ever run (placement's rule: its labels, a node's
-- limits, its GPUs, its size), with reason saying what; it is cleared when
-- the task is placed or moves to any other state.
--
-- queue_timeout_seconds is the queue timeout that applies to the task, its
-- spec's queue_timeout or, when that is 0, the coordinator's --queue-timeout
-- when it was submitted (0: none); queue_deadline is when it fails if it is
-- still queued then. It is set at submit and at every move back to queued
-- (counted from the end of a retry's backoff), and cleared by every other
-- move and by a placement, so the leader's sweep reads only the queued tasks
-- whose time is up, through tasks_queue_deadline.
alter table podium.tasks
    add column unschedulable boolean not null default false,
    add column queue_timeout_seconds bigint not null default 0,
    add column queue_deadline timestamptz;

create index tasks_queue_deadline on podium.tasks (queue_deadline)
    where state = 'queued' and queue_deadline is not null;

-- task_queue says which waiting tasks no node could ever run.
create or replace view podium.task_queue as
select
    t.id                                          as task,
    t.priority,
    t.created_at,
    extract(epoch from now() - t.created_at)::bigint as seconds_waiting,
    t.labels,
    t.cpu,
    t.memory_mb,
    t.attempt,
    t.reason                                      as why,
    t.unschedulable
from podium.tasks t
where t.state = 'queued'
order by t.priority desc, t.created_at, t.id;
