-- Privileged sidecars run only on nodes that allow them (issue 18). A node
-- says so in its Hello (podium-agent --allow-privileged-sidecars), kept here
-- as its other bounds on one task are (0006_node_limits.sql); a task whose
-- spec has a sidecar with privileged: true carries that beside its spec, so
-- that claiming queued tasks never reads the (possibly large) spec. The
-- defaults make both columns metadata-only: no table is rewritten.
alter table podium.nodes
    add column allow_privileged_sidecars boolean not null default false;

alter table podium.tasks
    add column privileged_sidecars boolean not null default false;

-- A task queued before the column existed was validated by a coordinator
-- that did not know the field and refused it, so none can ask for it; the
-- update is here for a spec written some other way all the same.
update podium.tasks set privileged_sidecars = true
where state = 'queued'
  and jsonb_path_exists(spec, '$.sidecars[*] ? (@.privileged == true)');
