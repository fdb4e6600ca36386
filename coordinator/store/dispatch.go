package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/podiumhq/podium/internal/taskspec"
)

// Placement is one task given to one node.
type Placement struct {
	TaskID    string
	NodeID    string
	Attempt   int32
	CreatedAt time.Time
	// Reoffered is set when the attempt was given back by a node before and
	// is placed again under the same number.
	Reoffered bool
	// MaxAttempts is the task's budget of attempts, for its log's "attempt
	// 2 of 3".
	MaxAttempts int32
}

// Candidate is a connected node as a dispatch pass may use it, as the tables
// show it now: its room, what it is already committed to, and its bounds on
// one task. Package dispatch turns it into the placement.Candidate the leader
// keeps and charges between reads; the store knows no placement rule.
type Candidate struct {
	ID             string
	Labels         []string
	Draining       bool
	SlotLimit      int32 // the operator's override when set, else the agent's
	Running        int32 // active tasks, plus the slots busy tearing down
	CPUCores       float64
	MemoryMB       int64
	CommittedCPU   float64
	CommittedMemMB int64
	LastAssignedAt time.Time // the epoch when never
	Limits         NodeLimits
	GPUs           []NodeGPU
	CommittedGPUs  int32
	DiskFreeMB     int64
	MinFreeDiskMB  int64
	// DiskLowSince and EngineDownSince are zero while the disk is above its
	// floor and the engine answers.
	DiskLowSince    time.Time
	EngineDownSince time.Time
	// Absent is set on a node Fleet read that is not connected now: it has
	// nothing running to count, and is as it last reported itself.
	Absent bool
}

// Candidates reads the connected nodes with what they are already committed
// to. It aggregates every active task, so the dispatcher keeps the result
// between passes rather than reading it for each.
//
// A node heard from longer than silentFor ago (the unreachable threshold) is
// left out even while its row still says online. The watchdog's verdict lags
// on purpose (after a leader change it gives every node the whole period to
// reconnect), but a task placed in that window on a node that never comes
// back is lost with it; one that does come back is a candidate again at its
// first heartbeat.
func (s *Store) Candidates(ctx context.Context, silentFor time.Duration) ([]Candidate, error) {
	return s.candidates(ctx, connectedSQL+" order by id", silentFor)
}

// Fleet is Candidates followed by the enrolled nodes it leaves out that
// have connected at least once (Absent): what placement counts as the fleet
// when it tells a task no node could ever run (unschedulable) from one that
// waits for a node to come back. A node that never connected has said
// nothing of itself, and one retired for good is removed (RemoveNode). The
// absent nodes are read in the same statement: a node that drops between
// two statements would be in neither list.
func (s *Store) Fleet(ctx context.Context, silentFor time.Duration) ([]Candidate, error) {
	return s.candidates(ctx, "select * from ("+connectedSQL+" union all "+absentSQL+") f order by absent, id", silentFor)
}

// connectedSQL reads the connected nodes (see Candidates); absentSQL the
// others that connected once (see Fleet), with the same columns.
const (
	connectedSQL = `select n.id, n.labels, n.draining,
			case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end,
			coalesce(t.running, 0) + n.busy_slots, n.cpu_cores, n.memory_mb, coalesce(t.cpu, 0), coalesce(t.mem, 0),
			coalesce(n.last_assigned_at, 'epoch'::timestamptz),
			n.max_cpu, n.max_memory_mb, n.max_pids, n.max_timeout_seconds, n.max_output_bytes, n.permit_egress,
			n.allow_privileged_sidecars, n.gpus, coalesce(t.gpus, 0), n.disk_free_mb, n.min_free_disk_mb, n.disk_low_since,
			n.engine_down_since, false as absent
		from podium.nodes n
		left join (select node_id, count(*)::int as running, sum(cpu) as cpu, sum(memory_mb)::bigint as mem,
		                  sum(gpus)::int as gpus
		           from podium.tasks where state in ('scheduled', 'provisioning', 'running')
		           group by node_id) t on t.node_id = n.id
		where ` + connectedNode
	absentSQL = `select n.id, n.labels, n.draining,
			case when n.max_tasks_override > 0 then n.max_tasks_override else n.max_tasks end,
			0, n.cpu_cores, n.memory_mb, 0::float8, 0::bigint,
			coalesce(n.last_assigned_at, 'epoch'::timestamptz),
			n.max_cpu, n.max_memory_mb, n.max_pids, n.max_timeout_seconds, n.max_output_bytes, n.permit_egress,
			n.allow_privileged_sidecars, n.gpus, 0, n.disk_free_mb, n.min_free_disk_mb, n.disk_low_since,
			n.engine_down_since, true as absent
		from podium.nodes n
		where n.last_heartbeat_at is not null and not (` + connectedNode + `)`
	connectedNode = `n.session_replica is not null and n.status = 'online'
		  and n.last_heartbeat_at > now() - make_interval(secs => $1)`
)

func (s *Store) candidates(ctx context.Context, query string, silentFor time.Duration) ([]Candidate, error) {
	rows, err := s.pool.Query(ctx, query, silentFor.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Candidate, error) {
		var c Candidate
		var lowSince, engineDownSince *time.Time
		l := &c.Limits
		err := r.Scan(&c.ID, &c.Labels, &c.Draining, &c.SlotLimit, &c.Running, &c.CPUCores, &c.MemoryMB,
			&c.CommittedCPU, &c.CommittedMemMB, &c.LastAssignedAt,
			&l.MaxCPU, &l.MaxMemoryMB, &l.MaxPids, &l.MaxTimeoutSeconds, &l.MaxOutputBytes, &l.PermitEgress,
			&l.AllowPrivilegedSidecars, &c.GPUs, &c.CommittedGPUs, &c.DiskFreeMB, &c.MinFreeDiskMB, &lowSince,
			&engineDownSince, &c.Absent)
		if lowSince != nil {
			c.DiskLowSince = *lowSince
		}
		if engineDownSince != nil {
			c.EngineDownSince = *engineDownSince
		}
		return c, err
	})
}

// Need is what a claimed task asks of a node, as stored beside its spec:
// its labels, its cost (NewTask.Cost), what a node's limits are checked
// against, and its GPUs. Package dispatch hands it to placement.
type Need struct {
	Labels           []string
	CPU              float64
	MemoryMB         int64
	Pids             int64
	TimeoutSeconds   int64
	OutputLimitBytes int64
	// AllowEgress are the spec's allow_egress ranges, as written.
	AllowEgress        []string
	PrivilegedSidecars bool
	GPUs               int32
	GPUModel           string
	GPUMemoryMB        int64
}

// Claimed is a queued task a pass claimed, as the pass offers it to its
// PlaceFunc.
type Claimed struct {
	ID   string
	Need Need
	// Sharer is who the task shares slots as under fair share (its
	// submitter, or "group G"); "" under FIFO (DispatchPassFIFO).
	Sharer string
	// Contended says the pass claimed the tasks of more than one sharer:
	// only then is a task that finds every node busy waiting for its fair
	// share rather than for the fleet to have room at all. Running and
	// Queued are then the sharer's tasks holding a slot and queued (0
	// otherwise: they are counted only when sharers contend).
	Contended       bool
	Running, Queued int64
}

// PlaceFunc says which node a claimed task goes to, or why it waits.
// DispatchPass asks it once per task, in the order the tasks are claimed,
// and writes whatever it answers; the choice and its wording are the
// caller's (package dispatch, through package placement), so no placement
// rule lives in SQL.
type PlaceFunc func(task Claimed) Verdict

// Verdict is a PlaceFunc's answer: the node the task goes to, or, with
// NodeID "", why it waits and whether no node could ever run it
// (podium.tasks.unschedulable). A task that becomes unschedulable gets a
// note in its log saying why, once, so that whoever follows it reads it.
type Verdict struct {
	NodeID        string
	Why           string
	Unschedulable bool
}

// ErrNotRung is wrapped by DispatchPass's error when the pass committed but
// its doorbells were not rung: the placements stand (they are returned), and
// the nodes find their commands when they next look.
var ErrNotRung = errors.New("the placements are stored but their doorbells were not rung")

// claimQueued is the pass's claim with fair share on. The order it claims in
// is dispatch.Order, the policy stated in Go, executed here because SKIP
// LOCKED with a LIMIT takes the rows the statement reaches first: priority,
// then the virtual time (running + k) / weight of each sharer's k-th queued
// task of that priority, then age, then id. A sharer is a spec's group when
// it names one, its submitter (requested_by) otherwise; running counts its
// tasks already holding a slot, and weight is the submitter's in
// podium.users, or the group's in podium.group_weights (1 when there is no
// row). A change to either side must keep TestClaimOrderIsDispatchOrder
// (coordinator/dispatch) passing.
//
// It is one statement, set-based, and costs what it claims rather than the
// length of the queue: a skip scan finds the sharers with queued tasks (one
// index probe each, tasks_fair_queue), at most a batch of each one's queue
// head is read and locked FOR UPDATE SKIP LOCKED (a task past its sharer's
// first batch cannot be among the batch claimed, since its own earlier tasks
// all come before it). Each sharer's running count (tasks_fair_running) and
// queued count (for the reason given to a task waiting for its fair share)
// are counted only when more than one sharer is waiting: with one, the order
// is its queue's, and a pass does not count what it does not need. Those
// counts read every active and queued task of the contending sharers, so a
// contended pass costs in proportion to them, once per sharer: the counts
// CTE is materialized, since inlined (as Postgres does with a CTE used once)
// they were counted again for every head row, and a pass of 10 contending
// sharers took seconds (the dispatch benchmark's contended burst). Rows are read and locked in the
// per-sharer scan itself, never joined back to tasks, so no plan can turn the claim into a scan of the
// whole queue. With several sharers it locks more rows than it returns (up to
// a batch each); only the leader claims, and the locks end with the pass. A
// group and a user of the same name are different sharers
// (podium.tasks.sharer).
const claimQueued = `with recursive sharers as (
		(select sharer from podium.tasks where state = 'queued' order by sharer limit 1)
		union all
		select (select t.sharer from podium.tasks t where t.state = 'queued' and t.sharer > s.sharer order by t.sharer limit 1)
		from sharers s where s.sharer is not null),
	many as (select count(*) > 1 as contended from sharers where sharer is not null),
	heads as (
		select c.*, row_number() over w as k
		from sharers s cross join lateral (
			select t.id, t.labels, t.cpu, t.memory_mb, t.pids, t.timeout_seconds, t.output_limit_bytes,
				t.allow_egress, t.privileged_sidecars, t.gpus, t.gpu_model, t.gpu_memory_mb, t.attempt, t.attempt_given_back,
				t.max_attempts, t.reason, t.created_at, t.priority, t.sharer, t.requested_by, t.share_group,
				t.concurrency_key, t.concurrency_limit, t.unschedulable
			from podium.tasks t
			where t.state = 'queued' and t.sharer = s.sharer and (t.not_before is null or t.not_before <= now())
			  and ($2::bool or not t.unschedulable)
			  and (t.concurrency_key = '' or t.reason not like 'concurrency key %' or ` + keyHasRoom + `)
			order by t.priority desc, t.created_at, t.id
			for update skip locked limit $1) c
		where s.sharer is not null
		window w as (partition by c.priority, c.sharer order by c.created_at, c.id)),
	counts as materialized (
		select s.sharer,
			case when (select contended from many) then
				(select count(*) from podium.tasks t where t.state in ('scheduled', 'provisioning', 'running') and t.sharer = s.sharer)
				else 0 end as running,
			case when (select contended from many) then
				(select count(*) from podium.tasks t where t.state = 'queued' and t.sharer = s.sharer) else 0 end as queued
		from sharers s where s.sharer is not null)
	select q.id, q.labels, q.cpu, q.memory_mb, q.pids, q.timeout_seconds, q.output_limit_bytes,
		q.allow_egress, q.privileged_sidecars, q.gpus, q.gpu_model, q.gpu_memory_mb, q.attempt, q.attempt_given_back,
		q.max_attempts, q.reason, q.created_at,
		case when q.share_group = '' then q.requested_by else 'group ' || q.share_group end, n.running, n.queued,
		q.concurrency_key, q.concurrency_limit, q.unschedulable
	from heads q
	join counts n on n.sharer = q.sharer
	left join podium.users u on q.share_group = '' and u.name = q.requested_by
	left join podium.group_weights g on q.share_group <> '' and g.name = q.share_group
	order by q.priority desc, (n.running + q.k)::float8 / coalesce(u.weight, g.weight, 1), q.created_at, q.id
	limit $1`

// claimFIFO is the claim with fair share turned off (the coordinator's
// --fair-share=false): priority, then age, then id (dispatch.OrderFIFO), the
// order before fair share, with no sharer read and nothing counted. It keeps the concurrency
// keys' test, which is not fair share's. Every claimed task's sharer is "",
// so none is told it waits for its fair share. It reads the queue through
// tasks_queue, the index the order was made for.
const claimFIFO = `select t.id, t.labels, t.cpu, t.memory_mb, t.pids, t.timeout_seconds, t.output_limit_bytes,
		t.allow_egress, t.privileged_sidecars, t.gpus, t.gpu_model, t.gpu_memory_mb, t.attempt, t.attempt_given_back,
		t.max_attempts, t.reason, t.created_at, '', 0::bigint, 0::bigint, t.concurrency_key, t.concurrency_limit,
		t.unschedulable
	from podium.tasks t
	where t.state = 'queued' and (t.not_before is null or t.not_before <= now())
	  and ($2::bool or not t.unschedulable)
	  and (t.concurrency_key = '' or t.reason not like 'concurrency key %' or ` + keyHasRoom + `)
	order by t.priority desc, t.created_at, t.id
	for update skip locked limit $1`

// keyHasRoom is the claim's test that a task's concurrency key is below its
// limit. A task already told its key is at its limit is not claimed again
// until the key has room, so that a long line of one key's tasks never fills
// the pass's batch ahead of other work; when a slot of the key frees, every
// one of them is claimed again and the ones still waiting are told who holds
// it now. This only spares the pass work: the limit itself is kept by
// lockKeys, under the key's lock.
const keyHasRoom = `(select count(*) from podium.tasks a where a.concurrency_key = t.concurrency_key
		and a.state in ('scheduled', 'provisioning', 'running')) < greatest(t.concurrency_limit, 1)`

type queued struct {
	id          string
	need        Need
	attempt     int32
	givenBack   bool
	maxAttempts int32
	reason      string
	// unschedulable is the task's flag as the claim read it.
	unschedulable bool
	created       time.Time
	// key and limit are the task's concurrency key ("" for none) and its
	// limit.
	key   string
	limit int32
	// by is who the task shares slots as (its submitter, or "group G");
	// running and waiting are how many of that sharer's tasks hold a slot
	// and are queued (counted only when sharers contend), for the reason a
	// task waiting for its fair share is given.
	by      string
	running int64
	waiting int64
}

func scanQueued(r pgx.CollectableRow) (queued, error) {
	var q queued
	err := r.Scan(&q.id, &q.need.Labels, &q.need.CPU, &q.need.MemoryMB, &q.need.Pids, &q.need.TimeoutSeconds,
		&q.need.OutputLimitBytes, &q.need.AllowEgress, &q.need.PrivilegedSidecars, &q.need.GPUs, &q.need.GPUModel, &q.need.GPUMemoryMB,
		&q.attempt, &q.givenBack, &q.maxAttempts, &q.reason, &q.created, &q.by, &q.running, &q.waiting, &q.key, &q.limit,
		&q.unschedulable)
	return q, err
}

// contended says whether the claimed tasks come from more than one
// sharer: only then is a task that waits for a slot waiting for its fair
// share rather than for the fleet to have room at all.
func contended(qs []queued) bool {
	for _, q := range qs {
		if q.by != qs[0].by {
			return true
		}
	}
	return false
}

// DispatchPass claims up to batch queued tasks with FOR UPDATE SKIP LOCKED,
// highest priority first, then by fair share between sharers (claimQueued,
// in dispatch.Order's order), asks place where each
// goes, records the placements and why the others wait, and, once that has
// committed, rings each placed task's followers and each node given work. It
// returns the placements and how many claimed tasks were left waiting. If it
// fails, nothing was written, though place may have been asked; if only the
// doorbells failed, the error wraps ErrNotRung and the placements stand.
// The caller runs it when something says tasks are queued (a doorbell), not
// to find out whether any are.
//
// A pass is two round trips to Postgres, not one per statement: the
// transaction is opened and the tasks claimed in one pipeline, and the
// placements are written, committed and rung in a second. Between them only
// place runs. Every round trip is latency on each task of the pass, and on a
// loaded machine a round trip, not the work in it, is most of a statement's
// cost.
func (s *Store) DispatchPass(ctx context.Context, batch int, place PlaceFunc) (placed []Placement, waiting int, err error) {
	return s.DispatchPassWith(ctx, batch, place, PassOptions{})
}

// PassOptions choose a pass's claim.
type PassOptions struct {
	// FIFO claims by priority and age alone (DispatchPassFIFO).
	FIFO bool
	// SkipUnschedulable leaves out the tasks a pass already found no node
	// could ever run (podium.tasks.unschedulable). A sharer's queue is read
	// from its head, a batch at a time, so without it a few hundred tasks
	// nothing can run (a mistyped label) would keep every later task of
	// their sharer from ever being claimed. The dispatcher skips them but
	// in a pass every few seconds, which looks at them again, in case the
	// fleet can now run them.
	SkipUnschedulable bool
}

// DispatchPassWith is DispatchPass with the claim opts choose.
func (s *Store) DispatchPassWith(ctx context.Context, batch int, place PlaceFunc, opts PassOptions) (placed []Placement, waiting int, err error) {
	claim := claimQueued
	if opts.FIFO {
		claim = claimFIFO
	}
	return s.dispatchPass(ctx, claim, batch, place, !opts.SkipUnschedulable)
}

// DispatchPassFIFO is DispatchPass with fair share off: it claims by
// priority, then age (claimFIFO), and counts no sharer's tasks. The
// coordinator runs it under --fair-share=false.
func (s *Store) DispatchPassFIFO(ctx context.Context, batch int, place PlaceFunc) (placed []Placement, waiting int, err error) {
	return s.DispatchPassWith(ctx, batch, place, PassOptions{FIFO: true})
}

// dispatchPass runs a pass with claim; all includes the tasks already found
// unschedulable.
func (s *Store) dispatchPass(ctx context.Context, claim string, batch int, place PlaceFunc, all bool) (placed []Placement, waiting int, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	// A connection released inside a transaction (a pass that failed and
	// could not roll back) is closed by the pool, not reused.
	defer pc.Release()
	conn := pc.Conn()
	open := false
	defer func() {
		if open && err != nil && !errors.Is(err, ErrNotRung) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "rollback")
			cancel()
		}
	}()
	var qs []queued
	b := &pgx.Batch{}
	b.Queue("begin").Exec(func(pgconn.CommandTag) error { open = true; return nil })
	// The claim's cost estimate is large (it prices the concurrency keys'
	// per-row test as if every row ran it), enough to make Postgres JIT-compile
	// it, which took seconds of a pass that runs in milliseconds; in the same
	// pipeline, this costs no round trip.
	b.Queue("set local jit = off")
	b.Queue(claim, batch, all).Query(func(rows pgx.Rows) error {
		var err error
		qs, err = pgx.CollectRows(rows, scanQueued)
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, 0, err
	}
	active, err := lockKeys(ctx, conn, qs)
	if err != nil {
		return nil, 0, err
	}
	var why waitReasons
	shared := contended(qs)
	for _, q := range qs {
		next := nextAttempt(q.attempt, q.givenBack)
		if next > q.maxAttempts {
			// Nothing requeues a task past its last attempt, so only a row
			// written otherwise gets here; it ends rather than running
			// once more than its spec allows.
			if err := exhaust(ctx, conn, q.id, q.attempt, q.maxAttempts); err != nil {
				return nil, 0, err
			}
			continue
		}
		if q.key != "" && int32(len(active[q.key])) >= max(q.limit, 1) {
			waiting++
			why.add(q, Verdict{Why: taskspec.ConcurrencyReason(q.key, active[q.key])})
			continue
		}
		v := place(Claimed{ID: q.id, Need: q.need, Sharer: q.by, Contended: shared, Running: q.running, Queued: q.waiting})
		if q.key != "" && v.NodeID != "" {
			active[q.key] = append(active[q.key], q.id)
		}
		if v.NodeID == "" {
			waiting++
			why.add(q, v)
			continue
		}
		placed = append(placed, Placement{TaskID: q.id, NodeID: v.NodeID, Attempt: next, CreatedAt: q.created, Reoffered: next == q.attempt,
			MaxAttempts: q.maxAttempts})
	}
	b = &pgx.Batch{}
	why.queue(b)
	queuePlacements(b, placed)
	committed := false
	b.Queue("commit").Exec(func(ct pgconn.CommandTag) error {
		if ct.String() != "COMMIT" {
			return fmt.Errorf("the dispatch pass did not commit (%s)", ct)
		}
		committed = true
		return nil
	})
	// After the commit, as its own statement: Postgres serialises notifying
	// commits on one cluster-wide lock, so the pass's own commit does not
	// take it (a notifying commit would queue behind every other one). Sent
	// in the same pipeline, it costs no round trip of its own.
	if chans, payloads := doorbells(placed, why.noted); len(chans) > 0 {
		b.Queue("select pg_notify(c, p) from unnest($1::text[], $2::text[]) as n(c, p)", chans, payloads)
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if committed {
			return placed, waiting, fmt.Errorf("%w: %v", ErrNotRung, err)
		}
		return nil, 0, err
	}
	open = false
	return placed, waiting, nil
}

// lockKeys takes, for the concurrency keys of the claimed tasks, each key's
// transaction-scoped advisory lock, in key order so that two passes never
// wait on each other, and then reads each key's active tasks, oldest first.
// The read is a statement after the locks, so it sees every placement a
// pass that held a lock before committed: however replicas alternate as
// leader, and even while an old leader finishes its last pass, no two
// passes both fill a key's last slot. The limit lives here, in the database,
// not in a leader's memory. A pass that claimed no keyed task pays nothing.
func lockKeys(ctx context.Context, conn *pgx.Conn, qs []queued) (map[string][]string, error) {
	var keys []string
	for _, q := range qs {
		if q.key != "" && !slices.Contains(keys, q.key) {
			keys = append(keys, q.key)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	active := make(map[string][]string, len(keys))
	b := &pgx.Batch{}
	for _, k := range keys {
		b.Queue(lockKey, k)
	}
	b.Queue(`select concurrency_key, id from podium.tasks
		where concurrency_key = any($1) and state in ('scheduled', 'provisioning', 'running')
		order by scheduled_at, id`, keys).Query(func(rows pgx.Rows) error {
		var k, id string
		_, err := pgx.ForEachRow(rows, []any{&k, &id}, func() error {
			active[k] = append(active[k], id)
			return nil
		})
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("lock the concurrency keys: %w", err)
	}
	return active, nil
}

// lockKey is a concurrency key's advisory lock, held to the transaction's
// end. The prefix keeps it apart from any other advisory lock's numbers.
const lockKey = "select pg_advisory_xact_lock(hashtextextended('podium.concurrency:' || $1::text, 0))"

// waitReasons are a pass's writes for the tasks it left waiting: the
// reason and the unschedulable flag of each whose verdict changed, and a
// note in the log of each that became unschedulable (noted).
type waitReasons struct {
	ids, reasons []string
	never, note  []bool
	noted        []string
}

// add records q's verdict when it differs from what q's row says.
func (w *waitReasons) add(q queued, v Verdict) {
	if v.Why == q.reason && v.Unschedulable == q.unschedulable {
		return
	}
	note := v.Unschedulable && !q.unschedulable
	w.ids, w.reasons = append(w.ids, q.id), append(w.reasons, v.Why)
	w.never, w.note = append(w.never, v.Unschedulable), append(w.note, note)
	if note {
		w.noted = append(w.noted, q.id)
	}
}

// UnschedulableNote is how the note a task's log gets when it becomes
// unschedulable starts; its reason follows.
const UnschedulableNote = "unschedulable: "

// queue writes them, in one statement: each row's new reason and flag, and
// for a task that became unschedulable a note at the next position of its
// log (the claim locked its row, so nothing else extends the log meanwhile).
func (w *waitReasons) queue(b *pgx.Batch) {
	if len(w.ids) == 0 {
		return
	}
	b.Queue(`with w as (
			update podium.tasks t set reason = u.why, unschedulable = u.never, last_seq = t.last_seq + u.note::int
			from unnest($1::text[], $2::text[], $3::bool[], $4::bool[]) as u(id, why, never, note)
			where t.id = u.id
			returning t.id, t.last_seq, t.attempt, u.why, u.note)
		insert into podium.task_events (task_id, seq, attempt, kind, text)
		select id, last_seq, attempt, 'note', $5 || why from w where note`,
		w.ids, w.reasons, w.never, w.note, UnschedulableNote)
}

// doorbells are a pass's notifications: each placed task's followers, each
// node given work once, and the followers of each task that got a note.
func doorbells(placed []Placement, noted []string) (chans, payloads []string) {
	for _, id := range noted {
		chans, payloads = append(chans, ChannelTaskEvents), append(payloads, id)
	}
	rung := map[string]bool{}
	for _, p := range placed {
		chans, payloads = append(chans, ChannelTaskEvents), append(payloads, p.TaskID)
		if !rung[p.NodeID] {
			rung[p.NodeID] = true
			chans, payloads = append(chans, ChannelNodeCommands), append(payloads, p.NodeID)
		}
	}
	return chans, payloads
}

// nextAttempt is the attempt number a queued task's next placement gets: the
// next one, unless a node gave the current one back without running it
// ("no free slot", draining), in which case it is offered again under the
// same number. A given-back assignment is not an attempt: it uses up none of
// max_attempts and adds no row to podium.attempts.
func nextAttempt(attempt int32, givenBack bool) int32 {
	if givenBack && attempt > 0 {
		return attempt
	}
	return attempt + 1
}

// exhaust fails a queued task that has used every attempt its spec allows,
// saying so in its log, and rings its followers at the commit.
func exhaust(ctx context.Context, tx querier, id string, attempt, maxAttempts int32) error {
	reason := fmt.Sprintf("not placed again: all %d attempts used", maxAttempts)
	moved, err := transitionTask(ctx, tx, Transition{TaskID: id, From: []string{Queued}, To: Failed, Reason: &reason})
	if err != nil || !moved {
		return err
	}
	if err := appendStatus(ctx, tx, id, attempt, Failed, reason, nil, 0); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "select pg_notify($1, $2)", ChannelTaskEvents, id)
	return err
}

// queuePlacements queues the writes of a pass's placements, one statement
// per table rather than five per task: the leader's round trips to Postgres,
// not the work in them, are what bound dispatch. The tasks were claimed FOR
// UPDATE, so extending each one's log position cannot race another writer;
// the status event takes the position the first statement gave its task (a
// later statement of the same transaction sees it).
func queuePlacements(b *pgx.Batch, placed []Placement) {
	n := len(placed)
	if n == 0 {
		return
	}
	ids, nodes, reasons := make([]string, n), make([]string, n), make([]string, n)
	attempts := make([]int32, n)
	for i, p := range placed {
		ids[i], nodes[i], attempts[i], reasons[i] = p.TaskID, p.NodeID, p.Attempt, "assigned to "+p.NodeID
		if p.Attempt > 1 {
			// A later attempt's section of the log starts here; say which.
			reasons[i] += fmt.Sprintf(", attempt %d of %d", p.Attempt, p.MaxAttempts)
		}
	}
	b.Queue(`update podium.tasks t set state = 'scheduled', node_id = u.node, attempt = u.attempt,
			attempt_given_back = false, scheduled_at = now(), reason = '', last_seq = t.last_seq + 1, not_before = null,
			unschedulable = false, queue_deadline = null
		from unnest($1::text[], $2::text[], $3::int[]) as u(id, node, attempt)
		where t.id = u.id`, ids, nodes, attempts)
	// An attempt given back is offered again under its number: its row is
	// moved to the new node, keeping the events already stored of it
	// (acked_seq, which the assignment tells the node to number after).
	b.Queue(`insert into podium.attempts (task_id, attempt, node_id)
		select * from unnest($1::text[], $2::int[], $3::text[])
		on conflict (task_id, attempt) do update set node_id = excluded.node_id, assigned_at = now(), finished_at = null`,
		ids, attempts, nodes)
	b.Queue(`insert into podium.node_commands (node_id, kind, task_id, attempt)
		select n, 'assign', t, a from unnest($1::text[], $2::text[], $3::int[]) as u(n, t, a)`, nodes, ids, attempts)
	b.Queue(`insert into podium.task_events (task_id, seq, attempt, kind, state, reason)
		select u.t, k.last_seq, u.a, 'status', 'scheduled', u.r
		from unnest($1::text[], $2::int[], $3::text[]) as u(t, a, r) join podium.tasks k on k.id = u.t`,
		ids, attempts, reasons)
	b.Queue("update podium.nodes set last_assigned_at = now() where id = any($1)", nodes)
}

// CancelOutcome says what a cancel did.
type CancelOutcome struct {
	Task Task
	// NotifyNode is the node that was sent a cancel command, "" if none.
	NotifyNode string
}

// CancelTask cancels a task. A queued task ends cancelled at once, without
// running. A task held by a node gets a cancel command; it ends when the node
// reports it stopped. A finished task is left as it is.
func (s *Store) CancelTask(ctx context.Context, id, reason string) (CancelOutcome, error) {
	var out CancelOutcome
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = cancelInTx(ctx, tx, id, reason)
		return err
	})
	return out, err
}

// cancelInTx is CancelTask in the caller's transaction.
func cancelInTx(ctx context.Context, tx pgx.Tx, id, reason string) (CancelOutcome, error) {
	out := CancelOutcome{}
	err := func() error {
		t, err := scanTask(tx.QueryRow(ctx, "select "+taskColumns+" from podium.tasks where id = $1 for update", id))
		if err != nil {
			if err == pgx.ErrNoRows {
				return ErrNotFound
			}
			return err
		}
		switch {
		case t.State == Queued:
			r := "cancelled before it ran: " + reason
			if t.NotBefore != nil {
				// It ran, failed, and waits out its retry's backoff: the
				// wait ends here, and the next attempt never starts.
				r = fmt.Sprintf("cancelled during the backoff before attempt %d of %d: %s", t.Attempt+1, t.MaxAttempts, reason)
			}
			if _, err := transitionTask(ctx, tx, Transition{TaskID: id, From: []string{Queued}, To: Cancelled, Reason: &r}); err != nil {
				return err
			}
			if err := appendStatus(ctx, tx, id, t.Attempt, Cancelled, r, nil, 0); err != nil {
				return err
			}
		case slices.Contains(Active, t.State) && t.NodeID != nil:
			if t.CancelRequestedAt == nil {
				if _, err := tx.Exec(ctx, "update podium.tasks set cancel_requested_at = now(), cancel_reason = $2 where id = $1", id, reason); err != nil {
					return err
				}
			}
			if err := insertCommand(ctx, tx, Command{NodeID: *t.NodeID, Kind: "cancel", TaskID: id, Attempt: t.Attempt, Reason: reason}); err != nil {
				return err
			}
			if err := appendNote(ctx, tx, id, t.Attempt, "cancel requested: "+reason); err != nil {
				return err
			}
			out.NotifyNode = *t.NodeID
		}
		out.Task, err = getTask(ctx, tx, id)
		return err
	}()
	return out, err
}

// loseTask applies the node-loss policy to a task its node no longer has: a new
// attempt when the spec allows re-running it and attempts remain, otherwise
// lost. It first writes a note into the task's own log so the user reading it
// learns what happened. A task that has meanwhile left its active states is
// left alone.
func loseTask(ctx context.Context, tx pgx.Tx, t Task, why string) (requeued bool, err error) {
	if !t.RetryOnNodeLoss || t.Attempt >= t.MaxAttempts {
		reason := why
		if t.RetryOnNodeLoss {
			reason += fmt.Sprintf("; not retried: all %d attempts used", t.MaxAttempts)
		}
		moved, err := transitionTask(ctx, tx, Transition{TaskID: t.ID, From: Active, To: Lost, Attempt: t.Attempt, Reason: &reason})
		if err != nil || !moved {
			return false, err
		}
		if err := endAttempt(ctx, tx, t.ID, t.Attempt); err != nil {
			return false, err
		}
		if err := appendNote(ctx, tx, t.ID, t.Attempt, "node lost: "+why); err != nil {
			return false, err
		}
		return false, appendStatus(ctx, tx, t.ID, t.Attempt, Lost, reason, nil, 0)
	}
	reason := why + "; requeued"
	moved, err := transitionTask(ctx, tx, Transition{TaskID: t.ID, From: Active, To: Queued, Attempt: t.Attempt, Reason: &reason})
	if err != nil || !moved {
		return false, err
	}
	if err := endAttempt(ctx, tx, t.ID, t.Attempt); err != nil {
		return false, err
	}
	return true, appendNote(ctx, tx, t.ID, t.Attempt, fmt.Sprintf("node lost: %s; requeued for attempt %d of %d", why, t.Attempt+1, t.MaxAttempts))
}

// endAttempt records that an attempt the control plane gave up on has
// ended: a lost attempt is over for everything that reads attempts (usage
// counts attempts by the day they ended), though its node never said so. A
// node that comes back and reports the end later only confirms it.
func endAttempt(ctx context.Context, tx pgx.Tx, taskID string, attempt int32) error {
	_, err := tx.Exec(ctx, "update podium.attempts set finished_at = coalesce(finished_at, now()) where task_id = $1 and attempt = $2",
		taskID, attempt)
	return err
}

// tasksOnNode lists the tasks the control plane holds on a node.
func tasksOnNode(ctx context.Context, q querier, nodeID string) ([]Task, error) {
	rows, err := q.Query(ctx, "select "+taskColumns+` from podium.tasks
		where node_id = $1 and state in ('scheduled', 'provisioning', 'running') order by id`, nodeID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
}

// ReconcileNode settles, in one transaction, the tasks the control plane
// holds on a node against the ones the node reported when its stream opened
// (task id → attempt), and returns the tasks it gave up on. A held task the
// node reported at the same attempt is left alone. One still scheduled that
// the node did not report never reached it (the assign was lost with the old
// stream): its assign command is marked undelivered, so the node's delivery
// loop sends it again, rather than the task losing an attempt it never began.
// One past scheduled that the node did not report went down with the node's
// previous life: the node-loss policy applies (loseTask: a new attempt, or
// lost), and its id is returned so the caller can ring its watchers. What the
// node reported that the control plane does not hold there counts as the
// node's busy slots, with the stopping slots its Hello counted apart (the
// attempts it fenced and left out of its report).
func (s *Store) ReconcileNode(ctx context.Context, nodeID string, reported map[string]int32, stopping int32) (lost []string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		lost = nil
		held, err := tasksOnNode(ctx, tx, nodeID)
		if err != nil {
			return err
		}
		// What the node reported that the control plane does not hold there
		// is being torn down on it, each in a slot, and so is what it says it
		// is still stopping: busy until the node's own heartbeats say the
		// teardown ended (see FlushHeartbeats).
		busy := max(stopping, 0)
		for id, a := range reported {
			if !slices.ContainsFunc(held, func(t Task) bool { return t.ID == id && t.Attempt == a }) {
				busy++
			}
		}
		if _, err := tx.Exec(ctx, "update podium.nodes set busy_slots = $2 where id = $1", nodeID, busy); err != nil {
			return err
		}
		for _, t := range held {
			if a, ok := reported[t.ID]; ok && a == t.Attempt {
				continue
			}
			if t.State == Scheduled {
				if _, err := tx.Exec(ctx, `update podium.node_commands set delivered_at = null
					where node_id = $1 and task_id = $2 and attempt = $3 and kind = 'assign'`, nodeID, t.ID, t.Attempt); err != nil {
					return err
				}
				continue
			}
			if _, err := loseTask(ctx, tx, t, fmt.Sprintf("node %s came back without the task", nodeID)); err != nil {
				return err
			}
			lost = append(lost, t.ID)
		}
		return nil
	})
	return lost, err
}
