-- Task lists that scale (podium tasks --state/--user/--label/--node/--since
-- --after): every filter of ListTasks is served by an index whose order is
-- the list's own (created_at desc, id desc), so a page is an index range read
-- however many tasks the table holds, never a sequential scan and sort.
-- tasks_created (0001) already serves no filter, --since and --after.
--
-- The cost is on writes: a state change is not a HOT update (state is in
-- tasks_queue's predicate already), so each one also writes an entry in
-- tasks_state_created and, for a placement, tasks_node_created; the labels'
-- GIN index takes its entries through its pending list (fastupdate).
create index tasks_state_created on podium.tasks (state, created_at desc, id desc);
create index tasks_node_created on podium.tasks (node_id, created_at desc, id desc)
    where node_id is not null;
-- requested_by's index of 0010 lacks id, so a cursor could not seek in it.
create index tasks_requested_by_created on podium.tasks (requested_by, created_at desc, id desc);
drop index podium.tasks_requested_by_idx;
-- Labels are an array: a GIN index finds the tasks carrying one.
create index tasks_labels on podium.tasks using gin (labels);
