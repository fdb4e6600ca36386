package store

import (
	"context"

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
	Kind    string // "assign" or "cancel"
	TaskID  string
	Attempt int32
	Reason  string
}

// InsertCommand queues a command for a node.
func InsertCommand(ctx context.Context, q querier, c Command) error {
	_, err := q.Exec(ctx, `insert into podium.node_commands (node_id, kind, task_id, attempt, reason)
		values ($1, $2, $3, $4, $5)`, c.NodeID, c.Kind, c.TaskID, c.Attempt, c.Reason)
	return err
}

// PendingCommands lists a node's undelivered commands in the order they were made.
func (s *Store) PendingCommands(ctx context.Context, nodeID string) ([]Command, error) {
	rows, err := s.Pool.Query(ctx, `select id, node_id, kind, task_id, attempt, reason
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
