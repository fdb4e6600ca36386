package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Node is a row of podium.nodes plus what is derived from the tasks table.
type Node struct {
	ID           string
	KeyHash      []byte
	Hostname     string
	AgentVersion string
	Labels       []string
	// LabelSources says where each of Labels came from, in the same order.
	LabelSources     []NodeLabel
	Draining         bool
	MaxTasksOverride int32
	CPUCores         float64
	MemoryMB         int64
	DiskFreeMB       int64
	MaxTasks         int32
	Status           string
	LastHeartbeatAt  *time.Time
	SessionReplica   *string
	SessionEpoch     int64
	LastAssignedAt   *time.Time
	EnrolledAt       time.Time
	// RunningTasks are the tasks the control plane holds on the node plus
	// its busy slots: attempts it no longer holds there that the node, by its
	// own report, still spends a slot on (podium.nodes.busy_slots).
	RunningTasks int32
	// Limits are the node's bounds on one task, as its agent last said Hello.
	Limits NodeLimits
	// GPUs are the node's GPUs as its agent last reported them, and
	// GPUsInUse the sum of gpus over the tasks the control plane holds there.
	GPUs      []NodeGPU
	GPUsInUse int32
	// Disk is the node's free-space floor and whether it is below it.
	Disk NodeDisk
	// EngineDownSince is since when the node's Docker engine has not
	// answered its agent, as the agent last reported; nil while it answers.
	// Such a node takes no new task (placement.Candidate.EngineDownSince).
	EngineDownSince *time.Time
}

// NodeLabel is one of a node's labels and who gave it.
type NodeLabel struct {
	Label string
	// Source is LabelFromToken, LabelFromNode, LabelFromAdmin or
	// LabelFromUnknown.
	Source string
	// SetBy names the admin for LabelFromAdmin; empty otherwise.
	SetBy string
}

// labelSource is a value of podium.nodes.label_sources (JSON), keyed by
// the label.
type labelSource struct {
	Source string `json:"source"`
	SetBy  string `json:"set_by,omitempty"`
}

// labelSources orders the stored sources as labels are; a label with no
// source stored is LabelFromUnknown.
func labelSources(labels []string, stored map[string]labelSource) []NodeLabel {
	out := make([]NodeLabel, 0, len(labels))
	for _, l := range labels {
		src, ok := stored[l]
		if !ok || src.Source == "" {
			src = labelSource{Source: LabelFromUnknown}
		}
		out = append(out, NodeLabel{Label: l, Source: src.Source, SetBy: src.SetBy})
	}
	return out
}

// NodeGPU is one GPU of a node as its agent found it, stored as an element
// of podium.nodes.gpus (JSON: the field names below).
type NodeGPU struct {
	Index    int32  `json:"index"`
	UUID     string `json:"uuid"`
	Model    string `json:"model"`
	MemoryMB int64  `json:"memory_mb"`
}

// nonNilGPUs is gpus, or an empty list for nil: the column is a JSON array,
// never null.
func nonNilGPUs(gpus []NodeGPU) []NodeGPU {
	if gpus == nil {
		return []NodeGPU{}
	}
	return gpus
}

// NodeLimits are a node's bounds on one task (podium-agent --max-*,
// --allow-egress); zero and empty are no bound. The agent reports them in
// its Hello; they change only when the agent restarts, so heartbeats do not
// carry them to Postgres.
type NodeLimits struct {
	MaxCPU            float64
	MaxMemoryMB       int64
	MaxPids           int64
	MaxTimeoutSeconds int64
	MaxOutputBytes    int64
	PermitEgress      []string
	// AllowPrivilegedSidecars: the node runs sidecars that ask to be
	// privileged (podium-agent --allow-privileged-sidecars).
	AllowPrivilegedSidecars bool
}

// SlotLimit is how many tasks the node may run at once: the operator's override
// when there is one, else the node's own number.
func (n Node) SlotLimit() int32 {
	if n.MaxTasksOverride > 0 {
		return n.MaxTasksOverride
	}
	return n.MaxTasks
}

// FreeSlots is what is left of the slot limit, never negative; none while
// the node drains, its data disk is below its free-space floor, or its
// Docker engine does not answer.
func (n Node) FreeSlots() int32 {
	free := n.SlotLimit() - n.RunningTasks
	if free < 0 || n.Draining || n.Disk.LowSince != nil || n.EngineDownSince != nil {
		return 0
	}
	return free
}

const nodeColumns = `n.id, n.key_hash, n.hostname, n.agent_version, n.labels, n.draining,
	n.max_tasks_override, n.cpu_cores, n.memory_mb, n.disk_free_mb, n.max_tasks, n.status,
	n.last_heartbeat_at, n.session_replica, n.session_epoch, n.last_assigned_at, n.enrolled_at,
	(select count(*) from podium.tasks t where t.node_id = n.id
	   and t.state in ('scheduled', 'provisioning', 'running'))::int + n.busy_slots,
	n.max_cpu, n.max_memory_mb, n.max_pids, n.max_timeout_seconds, n.max_output_bytes, n.permit_egress,
	n.allow_privileged_sidecars,
	n.gpus, (select coalesce(sum(t.gpus), 0) from podium.tasks t where t.node_id = n.id
	   and t.state in ('scheduled', 'provisioning', 'running'))::int,
	n.label_sources, n.min_free_disk_mb, n.disk_low_since, n.engine_down_since`

func scanNode(row pgx.Row) (Node, error) {
	var n Node
	var sources map[string]labelSource
	err := row.Scan(&n.ID, &n.KeyHash, &n.Hostname, &n.AgentVersion, &n.Labels, &n.Draining,
		&n.MaxTasksOverride, &n.CPUCores, &n.MemoryMB, &n.DiskFreeMB, &n.MaxTasks, &n.Status,
		&n.LastHeartbeatAt, &n.SessionReplica, &n.SessionEpoch, &n.LastAssignedAt, &n.EnrolledAt,
		&n.RunningTasks, &n.Limits.MaxCPU, &n.Limits.MaxMemoryMB, &n.Limits.MaxPids, &n.Limits.MaxTimeoutSeconds,
		&n.Limits.MaxOutputBytes, &n.Limits.PermitEgress, &n.Limits.AllowPrivilegedSidecars, &n.GPUs, &n.GPUsInUse,
		&sources, &n.Disk.MinFreeMB, &n.Disk.LowSince, &n.EngineDownSince)
	n.LabelSources = labelSources(n.Labels, sources)
	return n, err
}

// GetNode reads one node.
func (s *Store) GetNode(ctx context.Context, id string) (Node, error) {
	n, err := scanNode(s.pool.QueryRow(ctx, "select "+nodeColumns+" from podium.nodes n where n.id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return n, ErrNotFound
	}
	return n, err
}

// ListNodes reads every node, oldest enrollment first.
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	rows, err := s.pool.Query(ctx, "select "+nodeColumns+" from podium.nodes n order by n.enrolled_at, n.id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) { return scanNode(r) })
}

// SessionStart is what a node's Hello writes.
type SessionStart struct {
	NodeID       string
	Replica      string
	Hostname     string
	AgentVersion string
	CPUCores     float64
	MemoryMB     int64
	DiskFreeMB   int64
	MaxTasks     int32
	Limits       NodeLimits
	// GPUs are the GPUs the Hello reports; they replace the stored ones.
	GPUs []NodeGPU
	// Disk is the free-space floor and state the Hello reports, and
	// EngineDownSince since when its engine has not answered (nil: it does).
	Disk            NodeDisk
	EngineDownSince *time.Time
	// Reported is how many attempts the node's Hello says it still has, and
	// the ones it says it is still stopping (fenced, left out of its list). Until
	// reconciliation has settled which of them the control plane holds, all
	// of them count as busy slots: the scheduler must not fill a slot the node
	// is still tearing down.
	Reported int32
	// Lock is the node's advisory lock key (lease.NodeKey), held on the
	// replica's lease connection for as long as the session is real: the
	// node_health view shows session_replica only while some connection
	// holds it, so a replica that died without ending its sessions stops
	// being shown at once.
	Lock int64
}

// StartSession records that replica now holds the node's stream and returns the
// node row with its new epoch. The caller must already hold the node's lease.
func (s *Store) StartSession(ctx context.Context, in SessionStart) (Node, error) {
	var epoch int64
	// The row is locked FOR UPDATE, not just updated, because that is the
	// lock that conflicts with ingest's FOR KEY SHARE: a write for the node's
	// old session commits before the epoch moves, or sees the new one.
	err := s.pool.QueryRow(ctx, `with locked as (select id from podium.nodes where id = $1 for update)
		update podium.nodes n set
			session_replica = $2, session_epoch = session_epoch + 1, status = 'online',
			session_started_at = clock_timestamp(),
			last_heartbeat_at = now(), hostname = $3, agent_version = $4,
			cpu_cores = $5, memory_mb = $6, disk_free_mb = $7, max_tasks = $8,
			max_cpu = $9, max_memory_mb = $10, max_pids = $11, max_timeout_seconds = $12,
			max_output_bytes = $13, permit_egress = $14, session_lock = $15, busy_slots = $16,
			allow_privileged_sidecars = $17, gpus = $18, min_free_disk_mb = $19, disk_low_since = $20,
			engine_down_since = $21
		from locked where n.id = locked.id returning n.session_epoch`,
		in.NodeID, in.Replica, in.Hostname, in.AgentVersion, in.CPUCores, in.MemoryMB, in.DiskFreeMB, in.MaxTasks,
		in.Limits.MaxCPU, in.Limits.MaxMemoryMB, in.Limits.MaxPids, in.Limits.MaxTimeoutSeconds,
		in.Limits.MaxOutputBytes, nonNil(in.Limits.PermitEgress), in.Lock, max(in.Reported, 0),
		in.Limits.AllowPrivilegedSidecars, nonNilGPUs(in.GPUs), in.Disk.MinFreeMB, in.Disk.LowSince,
		in.EngineDownSince,
	).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Node{}, ErrNotFound
	}
	if err != nil {
		return Node{}, err
	}
	return s.GetNode(ctx, in.NodeID)
}

// EndSession clears the node's session if it is still the one with this epoch,
// and marks it unreachable (an offline node stays offline): a node whose stream
// ended cannot be told anything until it comes back.
func (s *Store) EndSession(ctx context.Context, nodeID string, epoch int64) error {
	_, err := s.pool.Exec(ctx, `update podium.nodes set session_replica = null,
			status = case when status = 'offline' then 'offline' else 'unreachable' end
		where id = $1 and session_epoch = $2`, nodeID, epoch)
	return err
}

// Heartbeat is one node's latest heartbeat, buffered until the next flush.
// RunningUnknown is a Heartbeat's RunningTasks when the node made no count:
// the flush subtracts the control plane's count from it and keeps the smaller
// of that and the busy slots, so the busy slots stay as they are.
const RunningUnknown = math.MaxInt32

type Heartbeat struct {
	NodeID     string
	Epoch      int64
	At         time.Time
	CPUCores   float64
	MemoryMB   int64
	DiskFreeMB int64
	MaxTasks   int32
	// RunningTasks is how many attempts the node says hold a slot;
	// RunningUnknown when the beat stands for output rather than a count
	// the node made, so the node's busy slots are left as they are.
	RunningTasks int32
	// GPUsChanged says the node's GPUs differ from what its session last
	// recorded, and GPUs are the new list. GPUs change only when an operator
	// adds or removes one (and the agent is sent SIGHUP), so the flush
	// writes them only then, not on every heartbeat of every node.
	GPUsChanged bool
	GPUs        []NodeGPU
	// Disk is the node's free-space floor and whether it is below it, and
	// EngineDownSince since when its engine has not answered (nil: it does).
	Disk            NodeDisk
	EngineDownSince *time.Time
}

// FlushHeartbeats writes a whole flush of heartbeats in one statement. Only rows
// whose epoch still matches are written, so a replica that lost a node cannot
// move its clock. synchronous_commit is off for this transaction alone: losing
// the last second of heartbeats in a crash is harmless, and waiting for the WAL
// flush on every beat of ten thousand nodes is not.
func (s *Store) FlushHeartbeats(ctx context.Context, beats []Heartbeat) (int64, error) {
	if len(beats) == 0 {
		return 0, nil
	}
	n := len(beats)
	ids, epochs, ats := make([]string, n), make([]int64, n), make([]time.Time, n)
	cpus, mems, disks, maxes := make([]float64, n), make([]int64, n), make([]int64, n), make([]int32, n)
	running := make([]int32, n)
	floors, lows, engineDowns := make([]int64, n), make([]*time.Time, n), make([]*time.Time, n)
	for i, b := range beats {
		ids[i], epochs[i], ats[i] = b.NodeID, b.Epoch, b.At
		cpus[i], mems[i], disks[i], maxes[i] = b.CPUCores, b.MemoryMB, b.DiskFreeMB, b.MaxTasks
		running[i] = b.RunningTasks
		floors[i], lows[i], engineDowns[i] = b.Disk.MinFreeMB, b.Disk.LowSince, b.EngineDownSince
	}
	var written int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "set local synchronous_commit = off"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `update podium.nodes n set
				last_heartbeat_at = h.at, status = 'online', cpu_cores = h.cpu, memory_mb = h.mem,
				disk_free_mb = h.disk, max_tasks = h.maxt, min_free_disk_mb = h.floor, disk_low_since = h.low,
				engine_down_since = h.engine_down,
				-- The node's busy slots only come down, as its own count of
				-- what holds a slot drops to what the control plane holds
				-- there: a heartbeat counted before a new assignment reached
				-- the node may say less, never more, so it can end a teardown
				-- early by a heartbeat at worst, and a given-back assignment
				-- costs no attempt. The count is read only while there are
				-- busy slots, which is rarely.
				busy_slots = case when n.busy_slots = 0 then 0
					else least(n.busy_slots, greatest(0, h.running - (select count(*) from podium.tasks t
						where t.node_id = n.id and t.state in ('scheduled', 'provisioning', 'running'))::int)) end
			from unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::float8[], $5::bigint[], $6::bigint[], $7::int[], $8::int[],
					$9::bigint[], $10::timestamptz[], $11::timestamptz[])
				as h(id, epoch, at, cpu, mem, disk, maxt, running, floor, low, engine_down)
			where n.id = h.id and n.session_epoch = h.epoch`,
			ids, epochs, ats, cpus, mems, disks, maxes, running, floors, lows, engineDowns)
		written = tag.RowsAffected()
		if err != nil {
			return err
		}
		return flushGPUs(ctx, tx, beats)
	})
	return written, err
}

// flushGPUs writes the GPU lists of the heartbeats that changed them, in the
// flush's transaction and under the same epoch check. It costs a statement
// only in a flush where some node's GPUs changed.
func flushGPUs(ctx context.Context, tx pgx.Tx, beats []Heartbeat) error {
	var ids []string
	var epochs []int64
	var lists []string
	for _, b := range beats {
		if b.GPUsChanged {
			js, err := json.Marshal(nonNilGPUs(b.GPUs))
			if err != nil {
				return fmt.Errorf("node %s: encode its GPUs: %w", b.NodeID, err)
			}
			ids, epochs, lists = append(ids, b.NodeID), append(epochs, b.Epoch), append(lists, string(js))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `update podium.nodes n set gpus = h.gpus::jsonb
		from unnest($1::text[], $2::bigint[], $3::text[]) as h(id, epoch, gpus)
		where n.id = h.id and n.session_epoch = h.epoch`, ids, epochs, lists)
	return err
}

// RegisterReplica records a replica and the address nodes can reach it on,
// and rings ChannelReplicas so every replica tells its nodes. Row and doorbell
// are one statement, so one commit: a registration cut short has written
// neither, and one that returned nil has written both.
func (s *Store) RegisterReplica(ctx context.Context, id, address string) error {
	_, err := s.pool.Exec(ctx, `with r as (
			insert into podium.replicas (id, address) values ($1, $2)
			on conflict (id) do update set address = excluded.address, seen_at = now()
			returning 1)
		select pg_notify($3, '') from r`, id, address, ChannelReplicas)
	return err
}

// RetireReplica takes a stopping replica out of the list nodes are given
// and rings ChannelReplicas, in one statement as RegisterReplica. A replica
// that dies without retiring drops out once its row has not been touched for
// the window ReplicaAddresses is asked about.
func (s *Store) RetireReplica(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `with r as (delete from podium.replicas where id = $1 returning 1)
		select pg_notify($2, '') from r`, id, ChannelReplicas)
	return err
}

// LockTableSize is how many locks Postgres's shared lock table holds:
// max_locks_per_transaction × (max_connections + max_prepared_transactions),
// as its documentation sizes it. Every query's relation locks and every
// advisory lock (one per node a replica holds) share it.
func (s *Store) LockTableSize(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `select current_setting('max_locks_per_transaction')::int *
		(current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)`).Scan(&n)
	return n, err
}

// TouchReplica tells the others this replica is still alive.
func (s *Store) TouchReplica(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, "update podium.replicas set seen_at = now() where id = $1", id)
	return err
}

// ReplicaAddresses lists the advertised addresses of replicas seen recently.
func (s *Store) ReplicaAddresses(ctx context.Context, within time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `select distinct address from podium.replicas
		where address <> '' and seen_at > now() - make_interval(secs => $1) order by address`, within.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RequestTakeover records that a replica has a newer stream for the node.
func (s *Store) RequestTakeover(ctx context.Context, nodeID string) error {
	_, err := s.pool.Exec(ctx, "update podium.nodes set takeover_requested_at = clock_timestamp() where id = $1", nodeID)
	return err
}

// TakeoverRequests reports which of a replica's sessions (node id and the epoch
// it holds) are stale: the node has a newer session, a newer stream asked for
// it after the session started, or it was removed.
func (s *Store) TakeoverRequests(ctx context.Context, nodeIDs []string, epochs []int64) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `select h.id from unnest($1::text[], $2::bigint[]) as h(id, epoch)
		left join podium.nodes n on n.id = h.id
		where n.id is null or n.session_epoch <> h.epoch or n.takeover_requested_at > n.session_started_at`, nodeIDs, epochs)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// NodeChange is an operator's change to a node's durable settings. Nil fields
// are left as they are.
type NodeChange struct {
	Draining         *bool
	MaxTasksOverride *int32
	AddLabels        []string
	RemoveLabels     []string
	// By names the admin making the change: the source of AddLabels.
	By string
}

// ChangeNode writes the durable half of an operator's change and queues a
// config command, so a connected node gets the live half from whichever replica
// holds it. It returns the node as it now is. A label added becomes the
// admin's (source "admin", set by c.By) even if the node had it already: the
// admin has now vouched for it. A label removed loses its source with it.
func (s *Store) ChangeNode(ctx context.Context, nodeID string, c NodeChange) (Node, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update podium.nodes set
				draining = coalesce($2, draining),
				max_tasks_override = coalesce($3, max_tasks_override),
				labels = array(select distinct l from unnest(labels || $4::text[]) as l
				               where l <> all($5::text[]) order by l),
				label_sources = (label_sources - $5::text[]) || coalesce((select jsonb_object_agg(l,
					jsonb_build_object('source', $7::text, 'set_by', $6::text)) from unnest($4::text[]) as l
					where l <> all($5::text[])), '{}'::jsonb)
			where id = $1`, nodeID, c.Draining, c.MaxTasksOverride, nonNil(c.AddLabels), nonNil(c.RemoveLabels), c.By, LabelFromAdmin)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return insertCommand(ctx, tx, Command{NodeID: nodeID, Kind: "config"})
	})
	if err != nil {
		return Node{}, err
	}
	return s.GetNode(ctx, nodeID)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ErrNodeBusy means a node cannot be removed yet.
var ErrNodeBusy = errors.New("store: node is in use")

// RemoveNode forgets a node, refusing while it is online and not drained or
// still holds tasks: removing it then would strand work the control plane
// could no longer account for.
func (s *Store) RemoveNode(ctx context.Context, nodeID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		n, err := scanNode(tx.QueryRow(ctx, "select "+nodeColumns+" from podium.nodes n where n.id = $1 for update", nodeID))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if n.RunningTasks > 0 {
			return fmt.Errorf("%w: it holds %d task(s); drain it and wait for them to finish, or cancel them", ErrNodeBusy, n.RunningTasks)
		}
		if n.Status == "online" && !n.Draining {
			return fmt.Errorf("%w: it is online and not drained; run `podium node drain %s` first, or stop its agent", ErrNodeBusy, nodeID)
		}
		if _, err := tx.Exec(ctx, "delete from podium.node_commands where node_id = $1", nodeID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "delete from podium.nodes where id = $1", nodeID)
		return err
	})
}

// FleetCounts counts tasks by state and nodes by status.
func (s *Store) FleetCounts(ctx context.Context) (tasks, nodes map[string]int64, err error) {
	tasks, nodes = map[string]int64{}, map[string]int64{}
	rows, err := s.pool.Query(ctx, `select 't', state, count(*) from podium.tasks group by state
		union all select 'n', status, count(*) from podium.nodes group by status`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, name string
		var n int64
		if err := rows.Scan(&kind, &name, &n); err != nil {
			return nil, nil, err
		}
		if kind == "t" {
			tasks[name] = n
		} else {
			nodes[name] = n
		}
	}
	return tasks, nodes, rows.Err()
}
