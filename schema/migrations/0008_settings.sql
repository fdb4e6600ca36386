-- settings holds what every replica must agree on, in one row: the watchdog's
-- and the scheduler's thresholds. The leader reads them on every sweep, so a
-- replica started with new flags changes them for the whole control plane at
-- once; a replica given none of them uses the row. set_by is the replica that
-- last wrote it. Durations are milliseconds.
create table podium.settings (
    id                   int primary key default 1 check (id = 1),
    unreachable_after_ms bigint not null,
    offline_after_ms     bigint not null,
    ack_deadline_ms      bigint not null,
    write_off_after_ms   bigint not null,
    set_by               text not null,
    updated_at           timestamptz not null default now(),
    check (unreachable_after_ms > 0 and offline_after_ms > unreachable_after_ms),
    check (ack_deadline_ms > 0 and write_off_after_ms > 0)
);
