-- The fair-share groups (TaskSpec.group) each user may submit to, and so
-- the groups a secret granted to "group:NAME" reaches. A group was free
-- text a submitter chose, so anyone could borrow another team's weight;
-- membership makes it something an admin grants (podium user add --group,
-- podium user set-groups). Admins may submit to any group. The array is
-- small (a person belongs to a handful of teams) and read with the user's
-- row, so it lives there rather than in a table of its own.
alter table podium.users
    add column groups text[] not null default '{}'
        check (cardinality(groups) <= 64);
