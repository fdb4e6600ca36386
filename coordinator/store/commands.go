package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Command channel names. A NOTIFY on ChannelNodeCommands carries a node id and
// means "this node has pending commands"; on ChannelTaskEvents a task id and
// means "this task's log grew"; on ChannelSubmit nothing and means "the queue
// changed", or PayloadFleet and means "and so did the nodes it can go to".
const (
	ChannelNodeCommands = "podium_node_commands"
	ChannelTaskEvents   = "podium_task_events"
	ChannelSubmit       = "podium_submit"
	ChannelTakeover     = "podium_session_takeover"
	// ChannelReplicas, with no payload, means "a replica joined or left":
	// each replica pushes the new list to the nodes it holds.
	ChannelReplicas = "podium_replicas"
)

// PayloadFleet on ChannelSubmit says a node connected, went, or had its
// drain, slots or labels changed: the scheduler reads the nodes again.
const PayloadFleet = "fleet"

// Command is a row of podium.node_commands.
type Command struct {
	ID      int64
	NodeID  string
	Kind    string // "assign", "cancel", "config" or "inject"
	TaskID  string
	Attempt int32
	Reason  string
	Text    string
}

// insertCommand queues a command for a node.
func insertCommand(ctx context.Context, q querier, c Command) error {
	_, err := q.Exec(ctx, `insert into podium.node_commands (node_id, kind, task_id, attempt, reason, text)
		values ($1, $2, $3, $4, $5, $6)`, c.NodeID, c.Kind, c.TaskID, c.Attempt, c.Reason, c.Text)
	return err
}

// insertCommandID queues a command and returns its id.
func insertCommandID(ctx context.Context, q querier, c Command) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `insert into podium.node_commands (node_id, kind, task_id, attempt, reason, text)
		values ($1, $2, $3, $4, $5, $6) returning id`, c.NodeID, c.Kind, c.TaskID, c.Attempt, c.Reason, c.Text).Scan(&id)
	return id, err
}

// ErrNotRunning means a task is not held by a node, so nothing can reach it.
var ErrNotRunning = errors.New("store: the task is not on a node")

// InjectMessage queues a person's message for a task's inbox on the node that
// holds it and returns the message's id and that node.
func (s *Store) InjectMessage(ctx context.Context, taskID, text string) (id int64, nodeID string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var state string
		var node *string
		var attempt int32
		err := tx.QueryRow(ctx, "select state, node_id, attempt from podium.tasks where id = $1 for share", taskID).Scan(&state, &node, &attempt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if node == nil || !slices.Contains(Active, state) {
			return fmt.Errorf("%w (it is %s)", ErrNotRunning, state)
		}
		nodeID = *node
		id, err = insertCommandID(ctx, tx, Command{NodeID: nodeID, Kind: "inject", TaskID: taskID, Attempt: attempt, Text: text})
		if err != nil {
			return err
		}
		return appendNote(ctx, tx, taskID, attempt, fmt.Sprintf("message %d sent to the task's inbox", id))
	})
	return id, nodeID, err
}

// PendingCommand is an undelivered command with what delivering it needs to
// know of its task, read in the same statement. Task fields are zero when
// the command has no task or the task is gone.
type PendingCommand struct {
	Command
	// TaskFound says the task row exists.
	TaskFound   bool
	TaskState   string
	TaskNodeID  string
	TaskAttempt int32
	TaskSpec    *podiumv1.TaskSpec
	// AckedSeq is the stored high-water mark of the command's attempt: above
	// 0 for an assignment of an attempt a node gave back before, which the
	// node that takes it numbers its events after.
	AckedSeq uint64
}

// PendingCommandsFor lists the undelivered commands of several nodes, each
// node's in the order they were made, joined with their tasks: one statement
// for every node a replica is delivering to at once.
func (s *Store) PendingCommandsFor(ctx context.Context, nodeIDs []string) ([]PendingCommand, error) {
	rows, err := s.pool.Query(ctx, `select c.id, c.node_id, c.kind, c.task_id, c.attempt, c.reason, c.text,
			t.id is not null, coalesce(t.state, ''), coalesce(t.node_id, ''), coalesce(t.attempt, 0), t.spec,
			coalesce(a.acked_seq, 0)
		from podium.node_commands c left join podium.tasks t on t.id = c.task_id
		left join podium.attempts a on c.kind = 'assign' and a.task_id = c.task_id and a.attempt = c.attempt
		where c.node_id = any($1) and c.delivered_at is null order by c.id`, nodeIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingCommand, error) {
		var p PendingCommand
		var spec []byte
		var acked int64
		err := r.Scan(&p.ID, &p.NodeID, &p.Kind, &p.TaskID, &p.Attempt, &p.Reason, &p.Text,
			&p.TaskFound, &p.TaskState, &p.TaskNodeID, &p.TaskAttempt, &spec, &acked)
		p.AckedSeq = uint64(max(acked, 0))
		if err != nil || spec == nil {
			return p, err
		}
		p.TaskSpec = &podiumv1.TaskSpec{}
		if err := protojson.Unmarshal(spec, p.TaskSpec); err != nil {
			return p, fmt.Errorf("task %s: stored spec does not parse: %w", p.TaskID, err)
		}
		return p, nil
	})
}

// Delivery is a command written to a node's stream by the session with Epoch.
type Delivery struct {
	ID     int64
	NodeID string
	Epoch  int64
}

// MarkDeliveredMany records many deliveries in one statement and returns the
// ids it marked. A delivery whose session is no longer the node's (its epoch
// moved on) is not marked, so the node's new holder delivers it again.
func (s *Store) MarkDeliveredMany(ctx context.Context, ds []Delivery) (map[int64]bool, error) {
	ids, nodes, epochs := make([]int64, len(ds)), make([]string, len(ds)), make([]int64, len(ds))
	for i, d := range ds {
		ids[i], nodes[i], epochs[i] = d.ID, d.NodeID, d.Epoch
	}
	rows, err := s.pool.Query(ctx, `update podium.node_commands c set delivered_at = now()
		from unnest($1::bigint[], $2::text[], $3::bigint[]) as u(id, node_id, epoch)
		join podium.nodes n on n.id = u.node_id and n.session_epoch = u.epoch
		where c.id = u.id and c.node_id = u.node_id and c.delivered_at is null
		returning c.id`, ids, nodes, epochs)
	if err != nil {
		return nil, err
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	out := make(map[int64]bool, len(marked))
	for _, id := range marked {
		out[id] = true
	}
	return out, nil
}
