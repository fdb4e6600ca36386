-- A node's free-space floor on its data disk (podium-agent
-- --min-free-disk-mb, 0: none) and since when the disk has been below it
-- (null while above), as its agent last reported them. The scheduler places
-- no task on a node below its floor, and a task that waits for such a node
-- says so; `podium node get` shows both.
alter table podium.nodes
    add column min_free_disk_mb bigint not null default 0,
    add column disk_low_since timestamptz;
