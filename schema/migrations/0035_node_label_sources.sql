-- A node carries exactly the labels its enrollment token grants (issue 28).
-- Labels steer work, secret-bearing work included, to nodes; a node that
-- could name its own labels at enrollment (`podium-agent enroll --label`)
-- could ask for a trusted one and be sent production's secrets. Asking for
-- labels beyond the token's is now refused unless the admin who made the
-- token allowed it (`podium token create --allow-node-labels`).
alter table podium.enrollment_tokens
    add column allow_node_labels boolean not null default false;

-- Where each of a node's labels came from, so a person deciding whether to
-- trust a label can see who gave it: an object of label -> {"source":
-- "token" | "node" | "admin" | "unknown" (from before this migration, see
-- below), "set_by": the admin's name for "admin"}.
-- nodes.labels stays the truth the scheduler matches on; this column is kept
-- beside it in the same statements. It lives on the node's row because it
-- is read with the node and is as small as its labels (at most 64).
alter table podium.nodes
    add column label_sources jsonb not null default '{}'::jsonb;

-- Nodes enrolled before this migration: a label their (still stored)
-- enrollment token gave came from the token; of the others nobody recorded
-- whether the node asked for it or an admin added it, and they say so.
update podium.nodes n set label_sources = (
    select coalesce(jsonb_object_agg(l, jsonb_build_object('source',
        case when exists (select 1 from podium.enrollment_tokens t
                          where t.used_by_node = n.id and t.rekey_node is null and l = any (t.labels))
             then 'token' else 'unknown' end)), '{}'::jsonb)
    from unnest(n.labels) as l);
