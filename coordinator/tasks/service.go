// Package tasks serves podium.v1.TaskService: submitting, reading, cancelling
// and following tasks. It writes nothing a node must see directly: a submit is a
// row and a doorbell for the scheduler, a cancel a row and a doorbell for the
// replica holding the node's stream.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/groupcommit"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Service implements podium.v1.TaskService.
type Service struct {
	store     *store.Store
	bus       *bus.Bus
	log       *slog.Logger
	artifacts *artifacts.Service
	archive   *logarchive.Reader
	submits   *groupcommit.Batcher[store.NewTask, store.Task]
	bounds    Bounds
	defaults  Defaults
}

// Deps are what the task service works with.
type Deps struct {
	Store *store.Store
	// Bus brings the task-event doorbells that followers of a log wait on.
	Bus *bus.Bus
	// Artifacts lists and serves what tasks uploaded; nil lists nothing and
	// refuses downloads as not configured, so the task service, which has
	// nothing else to do with the object store, works the same without one.
	Artifacts *artifacts.Service
	// Archive reads archived logs; nil reads them with Store and Artifacts.
	Archive *logarchive.Reader
	Log     *slog.Logger
	// Bounds bound what members may ask for (priority, group); the zero
	// value caps their priority at DefaultMaxMemberPriority.
	Bounds Bounds
	// Defaults are what a submitted or rerun task gets where its spec says
	// nothing (the coordinator's --queue-timeout).
	Defaults Defaults
}

// NewService returns the task service. Submit stores nothing until Run runs.
func NewService(deps Deps) *Service {
	if deps.Archive == nil {
		deps.Archive = logarchive.NewReader(deps.Store, deps.Artifacts)
	}
	return &Service{store: deps.Store, bus: deps.Bus, artifacts: deps.Artifacts, archive: deps.Archive, log: deps.Log,
		submits: newSubmits(deps.Store), bounds: deps.Bounds, defaults: deps.Defaults}
}

// Run stores submitted tasks, many to a statement, until ctx ends, then
// returns nil; a Submit after that is refused with ErrStopped. Call it once,
// and end it only after the server has stopped taking requests, so that no
// Submit in flight is cut short.
func (s *Service) Run(ctx context.Context) error {
	s.submits.Run(ctx)
	return nil
}

// CallerKey is the context key under which the server puts who is calling.
type CallerKey struct{}

// Submit validates a spec, stores the task queued and wakes the scheduler.
// A spec that is not valid is refused with the field named and nothing stored.
// Validation is per call, before the task joins a batch, so that one bad spec
// never fails the others stored with it. A spec naming a secret that is not
// stored, or that the caller may not use, is refused too: only the names
// are stored, the values are read when the task is assigned (and who may
// use them is checked again then).
func (s *Service) Submit(ctx context.Context, req *connect.Request[podiumv1.SubmitRequest]) (*connect.Response[podiumv1.SubmitResponse], error) {
	spec := req.Msg.GetSpec()
	if spec == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("spec: required"))
	}
	if err := taskspec.Validate(spec); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.checkBounds(ctx, spec); err != nil {
		return nil, err
	}
	if err := s.checkSecrets(ctx, spec); err != nil {
		return nil, err
	}
	who, _ := ctx.Value(CallerKey{}).(string)
	nt := s.defaults.Row(spec, who)
	nt.Audit = store.AuditFrom(ctx)
	if nt.Audit != nil {
		nt.Audit.Target = nt.ID
	}
	var t store.Task
	var err error
	if oc := spec.GetConcurrency().GetOnConflict(); oc == taskspec.OnConflictCancelOlder || oc == taskspec.OnConflictCancelNewer {
		t, err = s.submitKeyed(ctx, nt)
	} else {
		t, err = s.submit(ctx, nt)
	}
	if err != nil {
		return nil, err
	}
	// One cheap line per task: at thousands of submits a second, rendering
	// whole specs into the log was a real share of the replica's CPU. The spec
	// is stored with the task; `podium task get` shows it.
	s.log.Info("task submitted", "task", t.ID, "image", spec.GetImage(), "by", who)
	return connect.NewResponse(&podiumv1.SubmitResponse{Task: view(ctx, t)}), nil
}

// submitKeyed stores a task whose concurrency key cancels on conflict
// (store.SubmitKeyed), then rings what it cancelled. Only an admin's
// cancel_older cancels other people's tasks, as only an admin may cancel
// them with TaskService.Cancel; a member's waits for them instead.
func (s *Service) submitKeyed(ctx context.Context, nt store.NewTask) (store.Task, error) {
	out, err := s.store.SubmitKeyed(ctx, nt, access.IsAdmin(ctx))
	if err != nil {
		return store.Task{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store the task: %w; submit it again", err))
	}
	for _, n := range out.NotifyNodes {
		_ = s.store.Notify(ctx, store.ChannelNodeCommands, n)
	}
	for _, id := range out.Cancelled {
		_ = s.store.Notify(ctx, store.ChannelTaskEvents, id)
	}
	return out.Task, nil
}

// checkSecrets refuses a spec naming a secret the caller may not use, in
// secrets or as a notify entry's signing secret (whose value signs a body
// the caller knows, so naming it is using it): one an admin did not grant
// them (secrets.Authorize), or, for an admin, one that is not stored. The
// task's owner is the caller, at submit and at rerun alike.
func (s *Service) checkSecrets(ctx context.Context, spec *podiumv1.TaskSpec) error {
	names := taskspec.SecretNames(spec)
	if len(names) == 0 {
		return nil
	}
	who, _ := ctx.Value(CallerKey{}).(string)
	if _, err := secrets.Authorize(ctx, s.store, who, names); err != nil {
		return secrets.CallError(ctx, err)
	}
	return nil
}

// Get returns one task.
func (s *Service) Get(ctx context.Context, req *connect.Request[podiumv1.GetRequest]) (*connect.Response[podiumv1.GetResponse], error) {
	t, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	p := view(ctx, t)
	if t.Attempt > 0 {
		// Get alone reads the usage: one more small query, which List and
		// the follow loop of Events need not pay for every task.
		u, err := s.store.AttemptUsage(ctx, t.ID, t.Attempt)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read the usage of task %s: %w (try again)", t.ID, err))
		}
		p.Usage = u
	}
	if err := s.addKeyHolders(ctx, t, p); err != nil {
		return nil, err
	}
	return connect.NewResponse(&podiumv1.GetResponse{Task: p}), nil
}

// view is t as the caller in ctx may see it: someone else's task, to anyone
// but an admin, without its env values (the names stay, so the spec still
// reads; env_hidden says they were taken out). Env is where secrets were
// passed before there were secrets, and still is for many.
func view(ctx context.Context, t store.Task) *podiumv1.Task {
	p := t.Proto()
	if access.Owns(ctx, t.RequestedBy) || p.Spec == nil {
		return p
	}
	p.Spec = proto.CloneOf(p.Spec)
	p.EnvHidden = true
	for k := range p.Spec.Env {
		p.Spec.Env[k] = ""
	}
	for _, sc := range p.Spec.Sidecars {
		for k := range sc.Env {
			sc.Env[k] = ""
		}
	}
	// A notify URL is often a credential itself (a chat webhook's URL is
	// all it takes to post there): only the owner and admins see it.
	for _, n := range p.Spec.Notify {
		n.Url = ""
		p.NotifyHidden = true
	}
	return p
}

// owned refuses a member acting (what: "cancel", "message") on a task that
// is not theirs.
func owned(ctx context.Context, t store.Task, what string) error {
	if access.Owns(ctx, t.RequestedBy) {
		return nil
	}
	return access.NotOwner(what, t.ID, t.RequestedBy)
}

func (s *Service) get(ctx context.Context, id string) (store.Task, error) {
	if !ids.Valid("task", id) {
		return store.Task{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("id: %q is not a task id (they look like task_01J…)", id))
	}
	t, err := s.store.GetTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return t, s.notFound(ctx, id)
	}
	if err != nil {
		return t, connect.NewError(connect.CodeUnavailable, err)
	}
	return t, nil
}

// notFound is the error for a task that is not stored: NotFound either way,
// but a task retention removed says so and when (its tombstone), because
// "no task" for an id the caller got from Podium reads like a typo or a bug.
func (s *Service) notFound(ctx context.Context, id string) error {
	at, err := s.store.TaskExpiredAt(ctx, id)
	switch {
	case err == nil:
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s expired by retention on %s: its record, log and artifacts are gone",
			id, Day(at)))
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no task %s", id))
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// Day is how expiry dates are written in messages: the date in UTC.
func Day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// List returns tasks newest first.
func (s *Service) List(ctx context.Context, req *connect.Request[podiumv1.ListRequest]) (*connect.Response[podiumv1.ListResponse], error) {
	var states []string
	for _, st := range req.Msg.GetStates() {
		name := store.StateName(st)
		if name == "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("states: %v is not a task state", st))
		}
		states = append(states, name)
	}
	f, err := listFilter(req.Msg, time.Now())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	f.States = states
	if req.Msg.GetMine() {
		c, _ := access.Caller(ctx)
		if f.RequestedBy != "" && f.RequestedBy != c.Name() {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("mine and requested_by %q ask for different people; give one", f.RequestedBy))
		}
		f.RequestedBy = c.Name()
	}
	ts, err := s.store.ListTasks(ctx, f)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("after: no task %s (it may have expired by retention): start the list again without it", f.After))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	out := &podiumv1.ListResponse{}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, view(ctx, t))
	}
	return connect.NewResponse(out), nil
}

// MaxListLimit bounds one page of List: a longer list is read a page at a
// time with the after cursor, so no request holds a replica's memory or the
// database for long.
const MaxListLimit = 1000

// listFilter checks a List request's filters, naming the field at fault and
// what to give instead, and turns them into the store's filter. now is the
// coordinator's clock, against which since may not be in the future (a
// future since lists nothing, which is always a mistake: a time zone or a
// sign).
func listFilter(m *podiumv1.ListRequest, now time.Time) (store.TaskFilter, error) {
	f := store.TaskFilter{RequestedBy: m.GetRequestedBy(), Label: m.GetLabel(), Node: m.GetNode(), Name: m.GetName(), After: m.GetAfter()}
	if l := m.GetLimit(); l < 0 || l > MaxListLimit {
		return f, fmt.Errorf("limit: %d is out of range: give 1 to %d (0 means 100), and page with after", l, MaxListLimit)
	}
	f.Limit = int(m.GetLimit())
	if f.RequestedBy != "" {
		if err := access.CheckName(f.RequestedBy); err != nil {
			return f, fmt.Errorf("requested_by: %w", err)
		}
	}
	if f.Label != "" {
		if p := taskspec.LabelProblem(f.Label); p != "" {
			return f, fmt.Errorf("label: %s", p)
		}
	}
	if f.Name != "" && !taskspec.ValidName(f.Name) {
		return f, fmt.Errorf("name: %q is not a task name (letters, digits and . _ - : / +, from a letter or digit, at most %d bytes)", clip(f.Name), taskspec.MaxNameBytes)
	}
	if f.Node != "" && !ids.Valid("node", f.Node) {
		return f, fmt.Errorf("node: %q is not a node id (node_ and 26 letters and digits, as podium nodes shows)", clip(f.Node))
	}
	if f.After != "" && !ids.Valid("task", f.After) {
		return f, fmt.Errorf("after: %q is not a task id (task_ and 26 letters and digits): give the last ID of the previous page", clip(f.After))
	}
	if ts := m.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return f, fmt.Errorf("since: %w", err)
		}
		// A minute of slack for a client whose clock runs ahead.
		if since := ts.AsTime(); since.After(now.Add(time.Minute)) {
			return f, fmt.Errorf("since: %s is in the future: give a time in the past", since.UTC().Format(time.RFC3339))
		}
		f.Since = ts.AsTime()
	}
	return f, nil
}

// clip shortens a refused value for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Cancel cancels a task. It does not wait for the node: a running task ends
// cancelled once its node has stopped it (SIGTERM, the grace period, SIGKILL).
// The reason is bounded (taskspec.MaxCancelReasonBytes): it is stored with
// the task, shown in its log and sent to its node.
func (s *Service) Cancel(ctx context.Context, req *connect.Request[podiumv1.CancelRequest]) (*connect.Response[podiumv1.CancelResponse], error) {
	if err := taskspec.CheckCancelReason("reason", req.Msg.GetReason()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	t, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if err := owned(ctx, t, "cancel"); err != nil {
		return nil, err
	}
	reason := req.Msg.GetReason()
	if reason == "" {
		reason = "cancelled by request"
		if who, _ := ctx.Value(CallerKey{}).(string); who != "" {
			reason = "cancelled by " + who
		}
	}
	out, err := s.store.CancelTask(ctx, req.Msg.GetId(), reason)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if out.NotifyNode != "" {
		_ = s.store.Notify(ctx, store.ChannelNodeCommands, out.NotifyNode)
	}
	_ = s.store.Notify(ctx, store.ChannelTaskEvents, out.Task.ID)
	return connect.NewResponse(&podiumv1.CancelResponse{Task: view(ctx, out.Task)}), nil
}

// Events streams a task's log from after_seq. With follow it stays open until
// the task has ended and every event up to its end was sent; the last message
// carries the task. It waits on the task's doorbell, with a slow poll as the
// safety net for a doorbell missed while the listener reconnected.
//
// An archived log (coordinator/logarchive) is read the same way: the archive
// up to the task's log_archived_seq, then the rows after it. The archive job
// may delete rows between the reading of the task and of its rows; a read
// that comes up short of what the task said was stored reads the task again
// and continues from the archive, so a follower sees no gap and no event twice.
func (s *Service) Events(ctx context.Context, req *connect.Request[podiumv1.EventsRequest], stream *connect.ServerStream[podiumv1.EventsResponse]) error {
	id := req.Msg.GetId()
	t, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if t.LogExpiredAt != nil {
		// Retention removed the log (--retain-logs): there is nothing to
		// send, and nothing will come. The task says when it went.
		return stream.Send(&podiumv1.EventsResponse{Task: view(ctx, t)})
	}
	bell, unsubscribe := s.bus.Subscribe(store.ChannelTaskEvents, id)
	defer unsubscribe()
	after := int64(req.Msg.GetAfterSeq())
	send := func(seq int64, ev *podiumv1.TaskEvent) error {
		if err := stream.Send(&podiumv1.EventsResponse{Seq: uint64(seq), Event: ev}); err != nil {
			return err
		}
		after = seq
		return nil
	}
	for {
		// Read the task before its events: if it was terminal then, every event
		// up to its last_seq is already committed.
		t, err := s.store.GetTask(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return s.notFound(ctx, id)
		}
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, err)
		}
		if t, err = s.readLog(ctx, t, &after, send); err != nil {
			return err
		}
		if t.LogExpiredAt != nil {
			// Expired while it was being followed: what was sent is all
			// there will be.
			return stream.Send(&podiumv1.EventsResponse{Task: view(ctx, t)})
		}
		if !req.Msg.GetFollow() || (store.Terminal(t.State) && after >= t.LastSeq) {
			return stream.Send(&podiumv1.EventsResponse{Task: view(ctx, t)})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-bell:
		case <-time.After(2 * time.Second):
		}
	}
}

// readLog sends the events of t's log past *after (logarchive's ReadLog,
// the one reading of a log), saying a task that retention expired meanwhile
// as the API says any task that is gone.
func (s *Service) readLog(ctx context.Context, t store.Task, after *int64, send func(int64, *podiumv1.TaskEvent) error) (store.Task, error) {
	t, err := s.archive.ReadLog(ctx, t, after, send)
	if errors.Is(err, store.ErrNotFound) {
		return t, s.notFound(ctx, t.ID)
	}
	return t, err
}

// Rerun submits a copy of a finished task as a new task, owned by the
// caller, with rerun_of naming the old one: the same spec, the same secrets
// by name (their values are read when the new task is assigned, so a secret
// set again since gives the new value). Only the task's owner or an admin may
// rerun it, as with cancel. A task not finished yet is refused: rerunning
// it would run the same work twice at once; cancel it first or wait.
//
// The spec is checked again as a submit's is: the bounds may have tightened
// since it was stored, a secret it names may have been deleted, and the
// caller, whose task the rerun is, may not be allowed the secrets the old
// task's owner used.
func (s *Service) Rerun(ctx context.Context, req *connect.Request[podiumv1.RerunRequest]) (*connect.Response[podiumv1.RerunResponse], error) {
	old, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if err := owned(ctx, old, "rerun"); err != nil {
		return nil, err
	}
	if !store.Terminal(old.State) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"task %s is %s, not finished: only a finished task can be rerun; wait for it (podium logs -f %s) or cancel it first (podium task cancel %s)",
			old.ID, old.State, old.ID, old.ID))
	}
	spec := proto.CloneOf(old.Spec)
	if err := taskspec.Validate(spec); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"task %s's spec is no longer accepted (%w): submit a corrected spec with podium run --spec", old.ID, err))
	}
	if err := s.checkBounds(ctx, spec); err != nil {
		return nil, err
	}
	if err := s.checkSecrets(ctx, spec); err != nil {
		return nil, err
	}
	who, _ := ctx.Value(CallerKey{}).(string)
	nt := s.defaults.Row(spec, who)
	nt.Audit, nt.RerunOf = store.AuditFrom(ctx), old.ID
	if nt.Audit != nil {
		nt.Audit.Target = nt.ID
	}
	t, err := s.submit(ctx, nt)
	if err != nil {
		return nil, err
	}
	s.log.Info("task rerun", "task", t.ID, "rerun_of", old.ID, "by", who)
	return connect.NewResponse(&podiumv1.RerunResponse{Task: view(ctx, t)}), nil
}

// MaxMessageBytes bounds one message sent to a task's inbox.
const MaxMessageBytes = 64 << 10

// Send puts a person's message in a running task's inbox. It does not wait for
// the task to read it: the node writes it to the inbox, and whatever in the task
// is blocked on a read gets it, in order, once.
func (s *Service) Send(ctx context.Context, req *connect.Request[podiumv1.SendRequest]) (*connect.Response[podiumv1.SendResponse], error) {
	t, err := s.get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if err := owned(ctx, t, "message"); err != nil {
		return nil, err
	}
	text := req.Msg.GetText()
	if text == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("text: required: say what to send"))
	}
	if len(text) > MaxMessageBytes {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("text: %d bytes is more than %d; send a file as an artifact instead", len(text), MaxMessageBytes))
	}
	id, nodeID, err := s.store.InjectMessage(ctx, req.Msg.GetId(), text)
	switch {
	case errors.Is(err, store.ErrNotRunning):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("task %s cannot take messages: %w", req.Msg.GetId(), err))
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	_ = s.store.Notify(ctx, store.ChannelNodeCommands, nodeID)
	_ = s.store.Notify(ctx, store.ChannelTaskEvents, req.Msg.GetId())
	return connect.NewResponse(&podiumv1.SendResponse{MessageId: id}), nil
}
