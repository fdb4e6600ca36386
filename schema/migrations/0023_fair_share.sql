-- Fair share (issue 19). Among queued tasks of equal priority the leader's
-- claim shares free slots between submitters (requested_by) in proportion to
-- their weight: a submitter's k-th queued task is offered at the virtual time
-- (running + k) / weight, so one person's long sweep no longer starves the
-- next person's ten tasks. A submitter with no row here (the local socket's
-- caller, a tailnet login never added) weighs 1.
alter table podium.users
    add column weight int not null default 1 check (weight between 1 and 1000);
