-- Podium's tables. Postgres is the only state the coordinator has: every replica
-- reads and writes these, and nothing a replica keeps in memory is needed to
-- recover from its loss.

create schema if not exists podium;

-- replicas are the coordinator processes that are or were serving. HelloAck hands
-- their addresses to nodes so a node whose stream drops can find another one.
create table podium.replicas (
    id         text primary key,
    address    text not null default '',
    started_at timestamptz not null default now(),
    seen_at    timestamptz not null default now()
);

-- enrollment_tokens are single use. Only the SHA-256 of a token is stored, so a
-- read of this table cannot be used to enroll a machine.
create table podium.enrollment_tokens (
    token_hash   bytea primary key,
    labels       text[] not null default '{}',
    created_at   timestamptz not null default now(),
    expires_at   timestamptz not null,
    used_at      timestamptz,
    used_by_node text
);

-- nodes are enrolled machines. The durable half of every operator setting
-- (draining, slots, labels) lives here so a node that is offline when the operator
-- acts picks it up when it returns.
create table podium.nodes (
    id                 text primary key,
    key_hash           bytea not null,
    hostname           text not null default '',
    agent_version      text not null default '',
    labels             text[] not null default '{}',
    draining           boolean not null default false,
    max_tasks_override integer not null default 0 check (max_tasks_override >= 0),
    cpu_cores          double precision not null default 0,
    memory_mb          bigint not null default 0,
    disk_free_mb       bigint not null default 0,
    max_tasks          integer not null default 0,
    status             text not null default 'offline'
                       check (status in ('online', 'unreachable', 'offline')),
    last_heartbeat_at  timestamptz,
    -- session_replica holds the node's stream, session_epoch increases with every
    -- new stream: a replica's write for the node names the epoch it was given, so a
    -- replica that lost the node cannot write for it.
    session_replica    text,
    session_epoch      bigint not null default 0,
    session_started_at timestamptz,
    -- takeover_requested_at is set by a replica that got a stream for the node
    -- while another replica still holds its lease: the holder ends its older
    -- session and lets go, so the newest stream wins wherever it landed.
    takeover_requested_at timestamptz,
    last_assigned_at   timestamptz,
    enrolled_at        timestamptz not null default now()
);

create table podium.tasks (
    id                  text primary key,
    -- spec is the TaskSpec as protobuf JSON, exactly as submitted.
    spec                jsonb not null,
    state               text not null default 'queued'
                        check (state in ('queued', 'scheduled', 'provisioning', 'running',
                                         'succeeded', 'failed', 'cancelled', 'lost')),
    reason              text not null default '',
    exit_code           integer,
    signal              integer not null default 0,
    node_id             text,
    attempt             integer not null default 0,
    priority            integer not null default 0,
    labels              text[] not null default '{}',
    -- cpu and memory_mb are what the task and its sidecars take out of a node's
    -- budget, kept beside the spec so placement can sum them in SQL.
    cpu                 double precision not null default 0,
    memory_mb           bigint not null default 0,
    max_attempts        integer not null default 1 check (max_attempts >= 1),
    retry_on_node_loss  boolean not null default false,
    requested_by        text not null default '',
    created_at          timestamptz not null default now(),
    scheduled_at        timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    cancel_requested_at timestamptz,
    -- cancel_reason is why the control plane asked the node to stop the task;
    -- 'timeout' makes the node's "cancelled" a "failed: timeout".
    cancel_reason       text,
    -- last_seq is the position of the newest event in the task's log. Ingest takes
    -- the task row's lock to extend it, so positions are handed out in commit order
    -- and a reader that follows "seq > n" never skips a late commit.
    last_seq            bigint not null default 0
);

create index tasks_queue on podium.tasks (priority desc, created_at, id) where state = 'queued';
create index tasks_node on podium.tasks (node_id)
    where state in ('scheduled', 'provisioning', 'running');
create index tasks_created on podium.tasks (created_at desc, id desc);
create index tasks_scheduled on podium.tasks (scheduled_at) where state = 'scheduled';
create index tasks_cancelling on podium.tasks (cancel_requested_at)
    where cancel_requested_at is not null and state in ('scheduled', 'provisioning', 'running');

-- attempts are the runs of a task, one per assignment to a node.
create table podium.attempts (
    task_id     text not null references podium.tasks (id) on delete cascade,
    attempt     integer not null,
    node_id     text not null,
    -- acked_seq is the highest node seq of this attempt that is stored. Ingest only
    -- takes the event right after it, so a replayed batch is a no-op.
    acked_seq   bigint not null default 0,
    assigned_at timestamptz not null default now(),
    finished_at timestamptz,
    primary key (task_id, attempt)
);

-- task_events is each task's log: its output byte for byte, its status changes
-- and Podium's own notes about it, in the order readers see them.
create table podium.task_events (
    task_id    text not null references podium.tasks (id) on delete cascade,
    seq        bigint not null,
    attempt    integer not null default 0,
    node_seq   bigint,
    at         timestamptz not null default now(),
    kind       text not null check (kind in ('stdout', 'stderr', 'status', 'note')),
    log_offset bigint,
    data       bytea,
    state      text,
    reason     text,
    exit_code  integer,
    signal     integer,
    text       text,
    primary key (task_id, seq)
);

-- node_commands are what the control plane asks of a node. A command is a row
-- first; a NOTIFY only tells the replica holding the node's stream to look, so a
-- lost notification delays a command but never drops it.
create table podium.node_commands (
    id           bigserial primary key,
    node_id      text not null,
    kind         text not null check (kind in ('assign', 'cancel', 'config', 'inject')),
    -- task_id and attempt are empty for a config command, which is about the node.
    task_id      text not null default '',
    attempt      integer not null default 0,
    reason       text not null default '',
    -- text is an inject's message.
    text         text not null default '',
    created_at   timestamptz not null default now(),
    delivered_at timestamptz
);

create index node_commands_pending on podium.node_commands (node_id, id) where delivered_at is null;
