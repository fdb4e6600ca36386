-- A node's bounds on one task (podium-agent --max-*, --allow-egress), as its
-- agent reports them in Hello, and the parts of each task's spec placement
-- checks them against, kept beside the spec as cpu and memory_mb are so that
-- claiming a queued task never reads its (possibly large) spec. Zero and an
-- empty list mean no bound and nothing asked. Placement is package
-- coordinator/placement's; these columns only carry its inputs.
alter table podium.nodes
    add column max_cpu             double precision not null default 0,
    add column max_memory_mb       bigint not null default 0,
    add column max_pids            bigint not null default 0,
    add column max_timeout_seconds bigint not null default 0,
    add column max_output_bytes    bigint not null default 0,
    add column permit_egress       text[] not null default '{}';

alter table podium.tasks
    -- pids is the task's process limit plus its sidecars', as memory_mb is.
    add column pids               bigint not null default 0,
    add column timeout_seconds    bigint not null default 0,
    add column output_limit_bytes bigint not null default 0,
    add column allow_egress       text[] not null default '{}';

-- Tasks still waiting were stored before the columns: fill them from their
-- specs (protobuf JSON writes int64 as strings and leaves zeros out).
update podium.tasks set
    pids = coalesce((spec->'resources'->>'pids')::bigint, 0)
        + coalesce((select sum((s->'resources'->>'pids')::bigint)
                    from jsonb_array_elements(coalesce(spec->'sidecars', '[]')) s), 0),
    timeout_seconds = coalesce((spec->>'timeoutSeconds')::bigint, 0),
    output_limit_bytes = coalesce((spec->>'outputLimitBytes')::bigint, 0),
    allow_egress = array(select jsonb_array_elements_text(coalesce(spec->'allowEgress', '[]')))
where state = 'queued';
