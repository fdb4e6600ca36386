-- Registry logins (podium registry login): the password is sealed by the
-- coordinator with the same key and scheme as podium.secrets (package
-- coordinator/secrets), with "registry:" and the host as associated data, so
-- `podium-coordinator secrets rotate` reseals these rows with the secrets.
-- A node receives a login only in the assignment of a task whose image (or a
-- sidecar's image) is on that host.
create table podium.registries (
	host text primary key check (length(host) between 1 and 253),
	username text not null check (length(username) between 1 and 256),
	ciphertext bytea not null,
	nonce bytea not null,
	key_id text not null,
	set_by text not null,
	set_at timestamptz not null default now()
);
