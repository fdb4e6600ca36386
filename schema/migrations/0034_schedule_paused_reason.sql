-- Why the coordinator paused a schedule on its own: a schedule's ticks run
-- as its owner, so when the owner is removed, made a viewer, or no longer
-- may ask for what the schedule's spec asks (a priority over the members'
-- cap, a group they left), the schedule is paused rather than left firing as
-- someone who may not submit. The reason is shown by `podium schedule ls`
-- and `get`, and cleared when a person who may resumes it. Empty for a
-- schedule a person paused, or one that runs.
alter table podium.schedules
    add column paused_reason text not null default '';
