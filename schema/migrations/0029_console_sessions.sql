-- Web console sessions (coordinator/console), for the local transport, where
-- a person signs in with a personal API token (or the bootstrap token) and
-- the browser then carries a session cookie instead of the token. Only the
-- SHA-256 of the session id is stored: a copy of this table does not let
-- anyone sign in. token_hash is the SHA-256 of the token presented, checked
-- again on every request, so removing the user (or rotating the bootstrap
-- token) ends their sessions at once. csrf is the secret every form of the
-- session carries. Expired rows are deleted whenever someone signs in, so
-- the table holds at most the sessions of the last expiry period.
create table podium.console_sessions (
    id_hash    bytea primary key check (length(id_hash) = 32),
    kind       text not null check (kind in ('token', 'user')),
    name       text not null check (length(name) <= 128),
    token_hash bytea not null check (length(token_hash) = 32),
    role_from  text not null,
    csrf       bytea not null check (length(csrf) = 32),
    created_at timestamptz not null default now(),
    expires_at timestamptz not null
);
create index console_sessions_expires on podium.console_sessions (expires_at);
