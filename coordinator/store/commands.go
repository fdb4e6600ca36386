package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Command channel names. A NOTIFY on ChannelNodeCommands carries a node id and
// means "this node has pending commands"; on ChannelTaskEvents a task id and
// means "this task's log grew"; on ChannelSubmit nothing and means "the queue
// changed".
const (
	ChannelNodeCommands = "podium_node_commands"
	ChannelTaskEvents   = "podium_task_events"
	ChannelSubmit       = "podium_submit"
	ChannelTakeover     = "podium_session_takeover"
)

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

// InsertCommand queues a command for a node.
func InsertCommand(ctx context.Context, q querier, c Command) error {
	_, err := q.Exec(ctx, `insert into podium.node_commands (node_id, kind, task_id, attempt, reason, text)
		values ($1, $2, $3, $4, $5, $6)`, c.NodeID, c.Kind, c.TaskID, c.Attempt, c.Reason, c.Text)
	return err
}

// InsertCommandID queues a command and returns its id.
func InsertCommandID(ctx context.Context, q querier, c Command) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `insert into podium.node_commands (node_id, kind, task_id, attempt, reason, text)
		values ($1, $2, $3, $4, $5, $6) returning id`, c.NodeID, c.Kind, c.TaskID, c.Attempt, c.Reason, c.Text).Scan(&id)
	return id, err
}

// PendingCommands lists a node's undelivered commands in the order they were made.
func (s *Store) PendingCommands(ctx context.Context, nodeID string) ([]Command, error) {
	rows, err := s.Pool.Query(ctx, `select id, node_id, kind, task_id, attempt, reason, text
		from podium.node_commands where node_id = $1 and delivered_at is null order by id`, nodeID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Command])
}

// MarkDelivered records that a command was written to the node's stream by the
// replica holding the session with this epoch. A replica that lost the node
// marks nothing, so the new holder delivers it again.
func (s *Store) MarkDelivered(ctx context.Context, id int64, nodeID string, epoch int64) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `update podium.node_commands set delivered_at = now()
		where id = $1 and delivered_at is null
		  and exists (select 1 from podium.nodes where id = $2 and session_epoch = $3)`, id, nodeID, epoch)
	return tag.RowsAffected() == 1, err
}

// ErrNotRunning means a task is not held by a node, so nothing can reach it.
var ErrNotRunning = errors.New("store: the task is not on a node")

// InjectMessage queues a person's message for a task's inbox on the node that
// holds it and returns the message's id and that node.
func (s *Store) InjectMessage(ctx context.Context, taskID, text string) (id int64, nodeID string, err error) {
	err = s.Tx(ctx, func(tx pgx.Tx) error {
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
		id, err = InsertCommandID(ctx, tx, Command{NodeID: nodeID, Kind: "inject", TaskID: taskID, Attempt: attempt, Text: text})
		if err != nil {
			return err
		}
		return AppendNote(ctx, tx, taskID, attempt, fmt.Sprintf("message %d sent to the task's inbox", id))
	})
	return id, nodeID, err
}
