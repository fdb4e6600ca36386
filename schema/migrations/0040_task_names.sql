-- A task's name (spec.name): what people call it in lists and the console.
-- Not unique and not an id; null for a task that has none (every task
-- before this migration). Copied out of the spec at insert, as labels are,
-- so that `podium tasks --name` reads an index in the list's own order
-- instead of the specs. Adding a nullable column without a default touches
-- no row, and the index holds only named tasks.
alter table podium.tasks
    add column name text;
create index tasks_name_created on podium.tasks (name, created_at desc, id desc)
    where name is not null;
