-- A node that gives an assignment back ("no free slot", draining) never ran
-- it, so the assignment is not an attempt: attempt_given_back marks a queued
-- task whose current attempt number was given back, and the next placement
-- reuses that number (and its podium.attempts row) instead of taking the
-- next one. Only a placement the node accepted, or lost, uses up an attempt.
alter table podium.tasks add column attempt_given_back boolean not null default false;

-- busy_slots are the slots a node still spends on attempts the control plane
-- no longer holds there: the ones a returning node was told to stop
-- (reconciliation) and is still tearing down, or what a node that said "no
-- free slot" has beyond what it holds. The scheduler counts them as taken;
-- the node's own heartbeats (running_tasks) bring the count down as its
-- teardowns end, so until then its word, not the tables', says what is free.
alter table podium.nodes add column busy_slots integer not null default 0 check (busy_slots >= 0);
