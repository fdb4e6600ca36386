-- The key the coordinator's apt repository is signed with (package
-- coordinator/aptrepo), when the operator gives none
-- (PODIUM_APT_SIGNING_KEY_FILE). One row, made once by whichever replica
-- starts first (insert ... on conflict do nothing) and read by every other,
-- so that all replicas sign with the same key and a node's apt trusts them
-- all. The private key is sealed like a secret (AES-256-GCM under the
-- secrets key, key_id naming it, "apt-signing-key" as associated data); it
-- never reaches the database in the clear. fingerprint is the public key's,
-- so an operator can compare it with what nodes have without the key.
create table podium.apt_signing_key (
	singleton boolean primary key default true check (singleton),
	ciphertext bytea not null,
	nonce bytea not null,
	key_id text not null,
	fingerprint text not null,
	created_at timestamptz not null default now()
);
