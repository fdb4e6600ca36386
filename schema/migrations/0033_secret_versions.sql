-- Secret versions pinned per task, and the coordinator's own keys out of the
-- secrets namespace (issue 28, hole 6 and parts of holes 1 and 7).
--
-- Why versions: a node that restarts re-reads the secrets of the tasks it
-- adopts, so that its redactor knows them again. It used to be sent their
-- current values; after `podium secret set` the container still holds the
-- old one, which the redactor then did not know, and the task printed it in
-- clear. Now each `secret set` makes a new version, an attempt pins the
-- version it was assigned, and adoption re-sends exactly that version.
--
-- podium.secrets keeps the current value, as before, and its number
-- (version). podium.secret_versions keeps the values of older versions that
-- some attempt still pins, copied there when they are replaced or deleted;
-- the leader's retention job deletes them once no pin is left. Every version
-- is sealed with the secret's name as associated data, as the current one
-- is, so moving a value between the tables needs no key.
alter table podium.secrets add column version integer not null default 1 check (version >= 1);

create table podium.secret_versions (
	name text not null,
	version integer not null check (version >= 1),
	ciphertext bytea not null,
	nonce bytea not null,
	key_id text not null,
	set_by text not null,
	set_at timestamptz not null,
	primary key (name, version)
);

-- secret_pins: the version of each secret an attempt was assigned. Written
-- when its assignment is built, read when its node adopts it after a
-- restart; released by the retention job once the attempt has ended (and with
-- the attempt, when its task expires).
create table podium.secret_pins (
	task_id text not null,
	attempt integer not null,
	name text not null,
	version integer not null,
	primary key (task_id, attempt, name),
	foreign key (task_id, attempt) references podium.attempts (task_id, attempt) on delete cascade
);
create index secret_pins_version on podium.secret_pins (name, version);

-- Attempts on nodes now were assigned the only version there was: pin it, so
-- that a `secret set` after the upgrade keeps what they hold.
insert into podium.secret_pins (task_id, attempt, name, version)
select distinct t.id, t.attempt, s.name, 1
from podium.tasks t
cross join lateral jsonb_array_elements(coalesce(t.spec->'secrets', '[]'::jsonb)) ref
join podium.secrets s on s.name = ref->>'name'
join podium.attempts a on a.task_id = t.id and a.attempt = t.attempt
where t.state in ('scheduled', 'provisioning', 'running')
on conflict do nothing;

-- The apt signing key was sealed with "apt-signing-key" as associated data,
-- which is also a valid secret name: its ciphertext copied onto a secret of
-- that name would open as that secret. New keys are sealed under
-- "podium:apt-signing-key", which no secret name can be (names are DNS
-- labels). legacy_aad marks a key still sealed the old way: true for the
-- rows there are (and for any an older replica inserts during an upgrade,
-- hence the default), false for what this version inserts. Each replica
-- re-seals a legacy key at start (coordinator/secrets.CheckStartup).
alter table podium.apt_signing_key add column legacy_aad boolean not null default true;

-- A webhook's generated signing secret was stored as a user secret
-- (podium.secrets, named webhook-<id>), so a task could name it in
-- --secret or notify[].secret. It now lives on the webhook's row, sealed
-- with "podium:webhook:<id>" as associated data, which no secret name can
-- be. The rows move here unchanged (still sealed under their old name,
-- signing_legacy) and each replica re-seals them at start; secret_name is
-- emptied, since no secret of that name exists any more.
alter table podium.webhooks
	add column signing_ciphertext bytea,
	add column signing_nonce bytea,
	add column signing_key_id text,
	add column signing_legacy boolean not null default false;

-- Only a secret named as the coordinator names them (webhook-<id after
-- hook_, lower-cased>) moves: that name is the associated data the value
-- opens under until it is re-sealed.
update podium.webhooks w
set signing_ciphertext = s.ciphertext, signing_nonce = s.nonce, signing_key_id = s.key_id, signing_legacy = true
from podium.secrets s
where w.generated_secret and s.name = w.secret_name and s.name = 'webhook-' || lower(substr(w.id, 6));

delete from podium.secrets s
using podium.webhooks w
where w.signing_legacy and s.name = w.secret_name;

update podium.webhook_outbox o set secret_name = ''
from podium.webhooks w
where o.webhook_id = w.id and w.signing_legacy;

update podium.webhooks set secret_name = '' where signing_legacy;
