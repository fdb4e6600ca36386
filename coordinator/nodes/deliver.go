package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/podiumhq/podium/coordinator/groupcommit"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// errBacklogged means a session's outgoing queue was full, so the rest of its
// commands wait for its next turn: one slow node must not hold up delivery to
// the others it shares a batch with.
var errBacklogged = errors.New("nodes: the node's outgoing queue is full")

// deliverer delivers the stored commands of every session on this replica
// that was rung, many sessions to a statement: one query reads all their
// pending commands with their tasks, the messages are queued on each stream,
// and one statement marks them delivered against each session's epoch.
type deliverer struct {
	store   *store.Store
	secrets *secrets.Vault
	log     *slog.Logger
	batcher *groupcommit.Batcher[*Session, error]
}

func newDeliverer(st *store.Store, vault *secrets.Vault, log *slog.Logger) *deliverer {
	d := &deliverer{store: st, secrets: vault, log: log}
	d.batcher = groupcommit.New(groupcommit.Config[*Session, error]{Flush: d.deliver})
	return d
}

// pending delivers sess's pending commands. It returns store.ErrStaleEpoch
// when the session has been replaced, ErrSessionClosed when it ended, and
// errBacklogged when its stream is not keeping up.
func (d *deliverer) pending(ctx context.Context, sess *Session) error {
	res, err := d.batcher.Do(ctx, sess)
	if err != nil {
		return err
	}
	return res
}

func (d *deliverer) run(ctx context.Context) { d.batcher.Run(ctx) }

func (d *deliverer) deliver(ctx context.Context, sessions []*Session) ([]error, error) {
	byNode := make(map[string]*Session, len(sessions))
	ids := make([]string, 0, len(sessions))
	for _, s := range sessions {
		if _, dup := byNode[s.NodeID]; !dup {
			ids = append(ids, s.NodeID)
		}
		byNode[s.NodeID] = s
	}
	cmds, err := d.store.PendingCommandsFor(ctx, ids)
	if err != nil {
		return nil, err
	}
	failed := map[string]error{}
	var sent []store.Delivery
	for _, c := range cmds {
		sess := byNode[c.NodeID]
		if failed[c.NodeID] != nil {
			continue // keep the node's commands in order: none after one that failed
		}
		msg, err := d.message(ctx, sess, c)
		if err != nil {
			failed[c.NodeID] = err
			continue
		}
		if msg != nil {
			if err := sess.trySend(msg); err != nil {
				failed[c.NodeID] = err
				continue
			}
		}
		sent = append(sent, store.Delivery{ID: c.ID, NodeID: c.NodeID, Epoch: sess.Epoch})
	}
	if len(sent) > 0 {
		marked, err := d.store.MarkDeliveredMany(ctx, sent)
		if err != nil {
			return nil, err
		}
		for _, s := range sent {
			if !marked[s.ID] && failed[s.NodeID] == nil {
				failed[s.NodeID] = store.ErrStaleEpoch
			}
		}
	}
	out := make([]error, len(sessions))
	for i, s := range sessions {
		out[i] = failed[s.NodeID]
	}
	return out, nil
}

// message is what a stored command becomes on the node's stream, or nil when
// it no longer applies (it is still marked delivered).
func (d *deliverer) message(ctx context.Context, sess *Session, c store.PendingCommand) (*podiumv1.StreamResponse, error) {
	if c.Kind == "config" {
		n, err := d.store.GetNode(ctx, sess.NodeID)
		if err != nil {
			return nil, err
		}
		d.log.Info("pushing node settings", "node", sess.NodeID, "draining", n.Draining,
			"max_tasks_override", n.MaxTasksOverride, "labels", n.Labels)
		sess.configure(n.Labels, n.Draining, n.MaxTasksOverride)
		return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Config{Config: &podiumv1.NodeConfig{
			Draining: n.Draining, MaxTasksOverride: n.MaxTasksOverride, Labels: n.Labels}}}, nil
	}
	if !c.TaskFound {
		return nil, nil
	}
	onNode := c.TaskNodeID == sess.NodeID && c.TaskAttempt == c.Attempt
	switch c.Kind {
	case "assign":
		if !onNode || c.TaskState != store.Scheduled {
			return nil, nil // revoked or moved on before delivery
		}
		// Who may use the secrets is checked again here, as the task's
		// owner: a grant revoked while the task waited fails it unsent.
		use, err := d.secrets.AuthorizeTask(ctx, c.TaskID, c.TaskSpec.GetSecrets())
		if err != nil {
			return nil, d.failUnresolved(ctx, c, err)
		}
		// The attempt pins the versions it is sent, so that its node gets the
		// same ones again after a restart (adoption).
		vals, err := d.secrets.ResolvePinned(ctx, c.TaskID, c.TaskAttempt, c.TaskSpec.GetSecrets())
		if err != nil {
			return nil, d.failUnresolved(ctx, c, err)
		}
		// Logins only for the hosts of this task's images: a node learns no
		// password it does not need for the pull it is about to make.
		auths, err := d.secrets.RegistryAuths(ctx, c.TaskSpec)
		if err != nil {
			return nil, d.failUnresolved(ctx, c, err)
		}
		// Audited before the values leave: a use the log lacks never happens.
		if err := use.Record(ctx); err != nil {
			return nil, err
		}
		a := &podiumv1.Assign{TaskId: c.TaskID, Attempt: c.TaskAttempt, Spec: c.TaskSpec, AckedSeq: c.AckedSeq, Secrets: vals, RegistryAuths: auths}
		// Debug, not Info: at thousands of tasks a second one line per
		// assignment is a real share of the replica's CPU, and the task's
		// own log and `podium task get` say where it went.
		d.log.Debug("assigning task", "node", sess.NodeID, "assign", a)
		sess.charge(c.TaskID, costOfSpec(c.TaskSpec))
		return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Assign{Assign: a}}, nil
	case "cancel":
		// Always delivered, even when the task has moved on or ended: a revoked
		// assignment must still be dropped by the node that may yet receive it.
		// A node that does not have the attempt ignores the cancel.
		if !onNode || store.Terminal(c.TaskState) {
			// Revoked before the node accepted it, or written off without the
			// node: no terminal event from the node will give the charge back.
			sess.release(c.TaskID)
		}
		grace := c.TaskSpec.GetCancelGraceSeconds()
		if grace <= 0 {
			grace = 30
		}
		d.log.Info("cancelling task", "node", sess.NodeID, "task", c.TaskID, "reason", c.Reason)
		return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Cancel{Cancel: &podiumv1.Cancel{
			TaskId: c.TaskID, Attempt: c.Attempt, Reason: c.Reason, GraceSeconds: grace}}}, nil
	case "inject":
		if !onNode || store.Terminal(c.TaskState) {
			return nil, nil // the task ended before its message could be delivered
		}
		return &podiumv1.StreamResponse{Msg: &podiumv1.StreamResponse_Inject{Inject: &podiumv1.Inject{
			TaskId: c.TaskID, Attempt: c.TaskAttempt, MessageId: c.ID, Text: c.Text}}}, nil
	}
	return nil, fmt.Errorf("unknown command kind %q", c.Kind)
}

// failUnresolved ends a task whose secrets cannot be resolved for its
// assignment (one was deleted after it was submitted, its owner may no
// longer use one, or the coordinator has no key): sending it without them
// would run it without what it asked for, and holding the node's delivery
// back would stop its other commands. The task fails with a reason naming
// what to do; nothing is sent, and a use refused is audited. It returns
// only errors of the store, which retry the delivery as any other does.
func (d *deliverer) failUnresolved(ctx context.Context, c store.PendingCommand, cause error) error {
	var missing *secrets.MissingError
	var denied *secrets.DeniedError
	if errors.As(cause, &denied) {
		denied.Hint = "who may use a secret is checked again when the task is assigned, and was not so now (a grant revoked, or a role changed, while it waited); rerun it once granted"
	} else if !errors.As(cause, &missing) && !errors.Is(cause, secrets.ErrNoKey) && !errors.Is(cause, secrets.ErrWrongKey) {
		return cause
	}
	// The refusal is audited before the task fails, so that whoever sees
	// the failure finds its row; a failed write retries the delivery.
	if err := secrets.RecordRefused(ctx, d.store, c.TaskID, cause); err != nil {
		return err
	}
	reason := "secrets: " + cause.Error()
	moved, err := d.store.FailAssignment(ctx, c.TaskID, c.TaskAttempt, reason)
	if err != nil {
		return err
	}
	if moved {
		d.log.Warn("task failed: its secrets cannot be resolved", "task", c.TaskID, "error", cause)
		_ = d.store.Notify(ctx, store.ChannelTaskEvents, c.TaskID)
		_ = d.store.Notify(ctx, store.ChannelSubmit, store.PayloadFleet)
	}
	return nil
}
