-- Webhooks (podium webhook, WebhookService) and their durable outbox.
--
-- webhooks are the destinations an admin registered. secret_name names the
-- stored secret (podium.secrets, sealed under the coordinator's key) whose
-- value signs the events; generated_secret says the coordinator made that
-- secret for this webhook, so removing the webhook removes it too. The
-- last_* columns say how the latest delivery went, for `podium webhook ls`.
create table podium.webhooks (
	id               text primary key,
	name             text not null default '',
	url              text not null check (octet_length(url) between 1 and 2048),
	events           text[] not null,
	secret_name      text not null,
	generated_secret boolean not null default false,
	created_by       text not null,
	created_at       timestamptz not null default now(),
	last_status      text not null default '',
	last_error       text not null default '',
	last_attempt_at  timestamptz
);
create unique index webhooks_name on podium.webhooks (name) where name <> '';

-- webhook_outbox holds one row per (event, destination) until it is
-- delivered (the row is deleted) or abandoned (deleted too, after the
-- configured time, 24 h by default), so the table holds only what is still
-- on its way. The rows are written by the triggers below, in the
-- transaction that made the change, so no writer of tasks or nodes can make
-- a change without its events, and no event exists for a change that rolled
-- back. webhook_id is null for a task's own notify: entry (per_task), whose
-- url and secret come from the spec. A worker on every replica claims due
-- rows with FOR UPDATE SKIP LOCKED and moves next_attempt_at a lease ahead
-- while it posts, so a replica that dies mid-POST leaves the row due again
-- once the lease has passed.
create table podium.webhook_outbox (
	id              bigint generated always as identity primary key,
	event_id        text not null,
	event_type      text not null,
	webhook_id      text references podium.webhooks (id) on delete cascade,
	url             text not null,
	secret_name     text not null default '',
	per_task        boolean not null,
	payload         jsonb not null,
	created_at      timestamptz not null default now(),
	next_attempt_at timestamptz not null default now(),
	attempts        integer not null default 0,
	last_error      text not null default ''
);
create index webhook_outbox_due on podium.webhook_outbox (next_attempt_at);
-- A queue: every row is inserted and soon deleted, so it is vacuumed as it
-- churns (as in 0018_autovacuum.sql), and its pages are reused.
alter table podium.webhook_outbox set (
	autovacuum_vacuum_scale_factor = 0.02,
	autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_insert_scale_factor = 0.05,
	autovacuum_vacuum_cost_delay = 0
);
create index webhook_outbox_webhook on podium.webhook_outbox (webhook_id) where webhook_id is not null;

-- webhook_time writes a time as the events carry it: RFC 3339 in UTC with
-- microseconds.
create function podium.webhook_time(t timestamptz) returns text
language sql stable as $$
	select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- webhook_enqueue writes the outbox rows of one event: one for every webhook
-- subscribed to its type, and one for every entry of notify (a task spec's
-- notify: list, empty for node events) whose events include the type or
-- that names no events.
create function podium.webhook_enqueue(typ text, body jsonb, notify jsonb) returns void
language plpgsql as $$
declare
	evt text := 'evt_' || replace(gen_random_uuid()::text, '-', '');
begin
	body := jsonb_build_object('schema', 'podium.event.v1', 'id', evt, 'type', typ,
		'created_at', podium.webhook_time(now())) || body;
	insert into podium.webhook_outbox (event_id, event_type, webhook_id, url, secret_name, per_task, payload)
	select evt, typ, w.id, w.url, w.secret_name, false, body
	from podium.webhooks w where typ = any (w.events);
	insert into podium.webhook_outbox (event_id, event_type, webhook_id, url, secret_name, per_task, payload)
	select evt, typ, null, n->>'url', coalesce(n->>'secret', ''), true, body
	from jsonb_array_elements(notify) n
	where coalesce(jsonb_array_length(n->'events'), 0) = 0 or n->'events' ? typ;
end
$$;

-- A task that reached a terminal state: task.lost when it was lost,
-- task.finished otherwise (succeeded, failed, cancelled). A task requeued
-- for a retry goes back to queued without passing a terminal state, so only
-- its last attempt makes an event.
create function podium.webhook_task_event() returns trigger
language plpgsql as $$
declare
	typ text := case when new.state = 'lost' then 'task.lost' else 'task.finished' end;
	notify jsonb := coalesce(new.spec->'notify', '[]'::jsonb);
begin
	if jsonb_array_length(notify) = 0 and not exists (select 1 from podium.webhooks where typ = any (events)) then
		return null;
	end if;
	perform podium.webhook_enqueue(typ, jsonb_build_object('task', jsonb_build_object(
		'id', new.id, 'state', new.state, 'reason', new.reason, 'exit_code', new.exit_code,
		'user', new.requested_by, 'labels', to_jsonb(new.labels), 'node', new.node_id,
		'attempt', new.attempt, 'schedule_id', new.schedule_id,
		'created_at', podium.webhook_time(new.created_at),
		'started_at', podium.webhook_time(new.started_at),
		'finished_at', podium.webhook_time(new.finished_at))), notify);
	return null;
end
$$;

create trigger tasks_webhook_event after update of state on podium.tasks for each row
	when (new.state in ('succeeded', 'failed', 'cancelled', 'lost') and old.state is distinct from new.state)
	execute function podium.webhook_task_event();

-- A node the watchdog marked offline (nothing else sets offline).
create function podium.webhook_node_event() returns trigger
language plpgsql as $$
begin
	if not exists (select 1 from podium.webhooks where 'node.offline' = any (events)) then
		return null;
	end if;
	perform podium.webhook_enqueue('node.offline', jsonb_build_object('node', jsonb_build_object(
		'id', new.id, 'hostname', new.hostname, 'labels', to_jsonb(new.labels), 'status', new.status,
		'last_heartbeat_at', podium.webhook_time(new.last_heartbeat_at))), '[]'::jsonb);
	return null;
end
$$;

create trigger nodes_webhook_event after update of status on podium.nodes for each row
	when (new.status = 'offline' and old.status is distinct from new.status)
	execute function podium.webhook_node_event();
