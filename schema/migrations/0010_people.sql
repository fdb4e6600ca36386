-- People. A user is a person the coordinator knows by name: on the local
-- transport by a personal API token (only its SHA-256 is stored, never the
-- token), on the tailnet by their Tailscale login (the name). role is what
-- they may do (coordinator/access holds the table of which call needs
-- which). The bootstrap PODIUM_TOKEN is not a row: it is the coordinator's
-- own admin, configured where the coordinator runs.
create table podium.users (
    name       text primary key check (length(name) between 1 and 128),
    role       text not null check (role in ('admin', 'member', 'viewer')),
    token_hash bytea not null unique check (length(token_hash) = 32),
    created_at timestamptz not null default now(),
    created_by text not null
);

-- Listing "my tasks" and "alice's tasks" reads by requested_by, newest first.
create index tasks_requested_by_idx on podium.tasks (requested_by, created_at desc);
