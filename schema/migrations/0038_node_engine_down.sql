-- Since when a node's Docker engine has not answered its agent (null while
-- it answers), as its agent last reported it. The scheduler places no task
-- on such a node, and a task that waits for it says so; `podium node get`
-- shows it.
alter table podium.nodes
    add column engine_down_since timestamptz;
