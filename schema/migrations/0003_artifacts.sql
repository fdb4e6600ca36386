-- artifacts are the files tasks produced. The bytes live in the object store
-- (S3/MinIO); a row here is written only after its object is complete, so a row
-- always names an object that exists, and an upload that failed half way leaves
-- no row behind.
create table podium.artifacts (
    id         text primary key,
    task_id    text not null references podium.tasks (id) on delete cascade,
    attempt    integer not null,
    node_id    text not null,
    -- name is the file's path relative to the task's workspace, already
    -- sanitised: no absolute path, no "." or ".." or empty segment.
    name       text not null,
    size       bigint not null check (size >= 0),
    -- sha256 is the lower-case hex digest of the stored bytes.
    sha256     text not null check (length(sha256) = 64),
    -- object_key is where the bytes are in the bucket. It is unique per upload
    -- (it contains the artifact id), so a replacing upload never overwrites the
    -- object a reader may be downloading; the old object is removed after the
    -- row has moved on.
    object_key text not null unique,
    created_at timestamptz not null default now(),
    -- One artifact per name and attempt: a second upload replaces the first,
    -- which is what makes an agent's retry after a lost answer harmless.
    unique (task_id, attempt, name)
);
