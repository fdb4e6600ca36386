-- Secrets (podium secret set): values sealed with AES-256-GCM by the
-- coordinator under a key that never reaches the database (package
-- coordinator/secrets). key_id names the key a row was sealed under, so a
-- coordinator started with another key says so. Tasks name secrets in their
-- spec; the values are read from here only to build a node's assignment.
create table podium.secrets (
	name text primary key check (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
	ciphertext bytea not null,
	nonce bytea not null,
	key_id text not null,
	set_by text not null,
	set_at timestamptz not null default now()
);
