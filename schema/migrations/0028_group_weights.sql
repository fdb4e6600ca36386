-- Group weights for fair share (issue 19). A spec's group (tasks.share_group)
-- shares free slots as one sharer; an admin gives it a weight here, as
-- podium.users.weight does for a person (`podium group set-weight`). A group
-- with no row weighs 1, so the table holds only the groups an admin weighed:
-- setting a group back to 1 deletes its row.
create table podium.group_weights (
    name   text primary key check (length(name) between 1 and 64),
    weight int not null check (weight between 1 and 1000),
    set_at timestamptz not null default now(),
    set_by text not null default ''
);
