-- Who may use each secret (issue 28). Before, any member could name any
-- stored secret in a task (or as a notify entry's signing secret) and so read
-- its value: a spec shows the names of the secrets it uses to everyone who
-- can read the task. Now a secret is usable by admins and by the principals
-- granted it here: a user's name (a local user or a tailnet login),
-- "group:NAME" (the users whose podium.users.groups holds NAME) or
-- "role:member" (every member). A secret with no rows is admins' alone, the
-- default. The grants are checked at submit, at every schedule tick and again
-- when the assignment is built (package coordinator/secrets). Deleting a
-- secret deletes its grants, so a secret set again under the same name starts
-- admins-only.
create table podium.secret_grants (
    secret     text not null references podium.secrets (name) on delete cascade,
    principal  text not null check (octet_length(principal) between 1 and 160),
    granted_by text not null,
    granted_at timestamptz not null default now(),
    primary key (secret, principal)
);
-- "Which secrets may alice use?" (podium secret ls as a member) reads by
-- principal.
create index secret_grants_principal on podium.secret_grants (principal);
