-- The audit log: one row for every call that changes something (submit,
-- cancel, send, node changes, tokens, people, secrets, registries), written
-- in the same transaction as the change, so a change without its row (or a
-- row without its change) cannot be committed. Refused and failed calls get
-- a row too, with the error's code as result. who is the caller's name
-- (requested_by's), role the role it had, transport local/tailnet/host,
-- action the API call ("TaskService.Cancel"), target what it acted on (a
-- task, node or user; empty when nothing in particular).
create table podium.audit_log (
    id        bigint generated always as identity primary key,
    at        timestamptz not null default now(),
    who       text not null,
    role      text not null,
    transport text not null,
    action    text not null,
    target    text not null default '',
    result    text not null
);
create index audit_log_at_idx on podium.audit_log (at desc);
create index audit_log_who_idx on podium.audit_log (who, at desc);
