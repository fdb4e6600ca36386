-- Tailnet identity. On the tailnet transport a node is bound to the Tailscale
-- device it enrolled from: its key is accepted only from that device, so a
-- copied identity file is useless on another machine. The stable device ID is
-- what is compared (it survives renames and address changes); the name is
-- kept for people reading the table. Both stay null/empty for nodes enrolled
-- over the local transport, which has no devices.
alter table podium.nodes
    add column tailscale_device_id text,
    add column tailscale_device    text not null default '';

-- rekey_node marks a token that re-enrolls an existing node instead of making
-- a new one: the node keeps its id, labels, settings and tasks' history, and
-- gets a new key and a new device binding. It is how a node moves to a new
-- machine. Removing the node removes its unused rekey tokens with it.
alter table podium.enrollment_tokens
    add column rekey_node text references podium.nodes (id) on delete cascade;
