-- Periodic tasks (podium schedule, ScheduleService).
--
-- next_run_at is the tick the leader fires next, in UTC; the leader's job
-- fires every schedule whose next_run_at has passed. Keeping the next tick in
-- the row rather than in a timer is what makes a leader change harmless: the
-- new leader reads the same row. It is null while the schedule is paused.
create table podium.schedules (
	id          text primary key,
	name        text not null unique,
	cron        text not null,
	timezone    text not null,
	spec        jsonb not null,
	overlap     text not null check (overlap in ('skip', 'allow', 'cancel_previous')),
	paused      boolean not null default false,
	created_by  text not null,
	created_at  timestamptz not null default now(),
	next_run_at timestamptz,
	last_task_id text
);
create index schedules_due on podium.schedules (next_run_at) where next_run_at is not null;

-- One row per tick handled, inserted in the transaction that creates the
-- tick's task: the primary key is what makes a tick create its task once,
-- even when two replicas both believe they lead for a moment. task_id is
-- null for a tick that created nothing (overlap skip). Run-now ticks are
-- the moment they were asked for. Only the latest ticks of a schedule are
-- kept (the leader trims the rest in the same transaction).
create table podium.schedule_ticks (
	schedule_id text not null references podium.schedules (id) on delete cascade,
	tick        timestamptz not null,
	task_id     text,
	note        text not null default '',
	primary key (schedule_id, tick)
);

-- schedule_id links a task back to the schedule that created it. No foreign
-- key: the schedule may be removed while its tasks are kept.
alter table podium.tasks add column schedule_id text;
