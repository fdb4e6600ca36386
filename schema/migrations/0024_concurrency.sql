-- Concurrency keys (issue 19). A task's spec.concurrency, kept beside the spec
-- as its GPU request is, so that the dispatch pass reads it with the claim
-- and never parses a spec. '' is no key.
--
-- The limit is enforced by the dispatch pass in the transaction that places
-- tasks, under a transaction-scoped advisory lock per key, so two replicas
-- (an old leader finishing a pass as the new one starts) cannot both place
-- the key's last free slot. The index finds a key's active tasks for the pass
-- (by key and state, so that counting them does not visit its queued ones)
-- and its queued and active ones for a submit that cancels on conflict.
alter table podium.tasks
    add column concurrency_key   text not null default '',
    add column concurrency_limit int  not null default 0;

create index tasks_concurrency_active on podium.tasks (concurrency_key, state)
    where concurrency_key <> '' and state in ('queued', 'scheduled', 'provisioning', 'running');
