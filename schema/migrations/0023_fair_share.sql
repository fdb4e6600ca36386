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
