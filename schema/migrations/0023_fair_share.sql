-- Fair share (issue 19). Among queued tasks of equal priority the leader's
-- claim shares free slots between submitters (requested_by) in proportion to
-- their weight: a submitter's k-th queued task is offered at the virtual time
-- (running + k) / weight, so one person's long sweep no longer starves the
-- next person's ten tasks. A submitter with no row here (the local socket's
-- caller, a tailnet login never added) weighs 1.
alter table podium.users
    add column weight int not null default 1 check (weight between 1 and 1000);

-- A spec's group (TaskSpec.group) shares slots as one in place of its
-- submitter: the tasks of a team's sweep count together whoever submitted
-- them. Kept beside the spec, as labels are, so the claim never reads specs.
-- Groups weigh 1.
alter table podium.tasks
    add column share_group text not null default '';

-- sharer is who a task shares slots as: its group, or its submitter. The
-- claim reads each sharer's queue head through tasks_fair_queue (a skip scan
-- over the sharers, then at most a batch from each), and its running count
-- through tasks_fair_running, so a pass costs what it claims and the number
-- of sharers, not the length of the queue.
alter table podium.tasks
    add column sharer text generated always as
        (case when share_group = '' then 'u:' || requested_by else 'g:' || share_group end) stored;

create index tasks_fair_queue on podium.tasks (sharer, priority desc, created_at, id) where state = 'queued';
create index tasks_fair_running on podium.tasks (sharer) where state in ('scheduled', 'provisioning', 'running');
