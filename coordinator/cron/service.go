package cron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/taskspec"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// shownTicks is how many of its latest ticks Get shows.
const shownTicks = 20

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// Service implements podium.v1.ScheduleService. Members create schedules
// (the role submitting needs: a schedule submits tasks) and see and manage
// their own; admins all of them.
type Service struct {
	store *store.Store
	log   *slog.Logger
	// now is the clock run-now and next-tick computation read; tests set it.
	now func() time.Time
	// bounds are what a member's spec may ask for.
	bounds tasks.Bounds
	// defaults are what run-now's task gets where the spec says nothing.
	defaults tasks.Defaults
}

// NewService returns the schedule service, with cfg's clock (time.Now when
// nil) and bounds; the ticker's other settings are not its.
func NewService(cfg Config, deps Deps) *Service {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: deps.Store, now: now, log: log, bounds: cfg.Bounds, defaults: cfg.Defaults}
}

func checkName(name string) error {
	if len(name) > MaxNameBytes || !namePattern.MatchString(name) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"name: %q is not a schedule name (a-z, 0-9, '.', '_', '-', starting with a letter or digit, at most %d bytes)",
			name, MaxNameBytes))
	}
	return nil
}

// Create validates everything and stores the schedule, or refuses with the
// field named and stores nothing.
func (s *Service) Create(ctx context.Context, req *connect.Request[podiumv1.ScheduleServiceCreateRequest]) (*connect.Response[podiumv1.ScheduleServiceCreateResponse], error) {
	m := req.Msg
	if err := checkName(m.GetName()); err != nil {
		return nil, err
	}
	sched, loc, err := Parse(m.GetCron(), m.GetTimezone())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	overlap := m.GetOverlap()
	switch overlap {
	case "":
		overlap = OverlapSkip
	case OverlapSkip, OverlapAllow, OverlapCancelPrevious:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"overlap: %q is not one of skip, allow, cancel_previous", overlap))
	}
	if m.GetSpec() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("spec: required"))
	}
	if err := taskspec.Validate(m.GetSpec()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	// Its ticks run as the creator, so what they may submit bounds it.
	creator, _ := ctx.Value(tasks.CallerKey{}).(string)
	caller, _ := access.Caller(ctx)
	if err := s.bounds.Check(ctx, s.store, creator, access.Role(caller.Role), m.GetSpec()); err != nil {
		return nil, err
	}
	if err := s.checkSecrets(ctx, creator, m.GetSpec()); err != nil {
		return nil, err
	}
	next := Next(sched, loc, s.now())
	if next.IsZero() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"cron: %q never matches a date (check the day-of-month and month fields)", m.GetCron()))
	}
	sc, err := s.store.CreateSchedule(ctx, store.Schedule{ID: ids.New("sched"), Name: m.GetName(), Cron: m.GetCron(),
		Timezone: loc.String(), Spec: m.GetSpec(), Overlap: overlap, CreatedBy: creator, NextRunAt: &next})
	if errors.Is(err, store.ErrScheduleExists) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
			"name: a schedule called %s exists; pick another name or remove it with `podium schedule rm %s`", m.GetName(), m.GetName()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("store the schedule: %w (try again)", err))
	}
	s.log.Info("schedule created", "schedule", sc.Name, "cron", sc.Cron, "timezone", sc.Timezone, "by", creator)
	return connect.NewResponse(&podiumv1.ScheduleServiceCreateResponse{Schedule: toProto(sc)}), nil
}

// checkSecrets refuses a spec naming a secret its owner may not use, or
// that is not stored, as Submit does (secrets.Authorize): better now than at
// every tick, where the check runs again as the owner.
func (s *Service) checkSecrets(ctx context.Context, owner string, spec *podiumv1.TaskSpec) error {
	names := taskspec.SecretNames(spec)
	if len(names) == 0 {
		return nil
	}
	if _, err := secrets.Authorize(ctx, s.store, owner, names); err != nil {
		return secrets.CallError(ctx, err)
	}
	return nil
}

// List lists the caller's schedules; an admin's lists everyone's.
func (s *Service) List(ctx context.Context, _ *connect.Request[podiumv1.ScheduleServiceListRequest]) (*connect.Response[podiumv1.ScheduleServiceListResponse], error) {
	owner := ""
	if !access.IsAdmin(ctx) {
		owner, _ = ctx.Value(tasks.CallerKey{}).(string)
	}
	scs, err := s.store.ListSchedules(ctx, owner)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("list schedules: %w (try again)", err))
	}
	out := &podiumv1.ScheduleServiceListResponse{}
	for _, sc := range scs {
		out.Schedules = append(out.Schedules, toProto(sc))
	}
	return connect.NewResponse(out), nil
}

// mine reads the schedule called name if the caller may see and manage it:
// their own, or any for an admin. Someone else's reads as not found, so
// names do not leak.
func (s *Service) mine(ctx context.Context, name string) (store.Schedule, error) {
	if err := checkName(name); err != nil {
		return store.Schedule{}, err
	}
	sc, err := s.store.GetSchedule(ctx, name)
	if err == nil && !access.Owns(ctx, sc.CreatedBy) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return sc, connect.NewError(connect.CodeNotFound, fmt.Errorf(
			"no schedule called %s of yours: `podium schedule ls` lists them", name))
	}
	if err != nil {
		return sc, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read schedule %s: %w (try again)", name, err))
	}
	return sc, nil
}

// Get returns a schedule and its latest ticks.
func (s *Service) Get(ctx context.Context, req *connect.Request[podiumv1.ScheduleServiceGetRequest]) (*connect.Response[podiumv1.ScheduleServiceGetResponse], error) {
	sc, err := s.mine(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	ticks, err := s.store.ScheduleTicks(ctx, sc.ID, shownTicks)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read the ticks of %s: %w (try again)", sc.Name, err))
	}
	out := &podiumv1.ScheduleServiceGetResponse{Schedule: toProto(sc)}
	for _, t := range ticks {
		out.Ticks = append(out.Ticks, &podiumv1.ScheduleTick{Tick: timestamppb.New(t.Tick), TaskId: deref(t.TaskID), Note: t.Note})
	}
	return connect.NewResponse(out), nil
}

// Pause stops a schedule's ticks until Resume.
func (s *Service) Pause(ctx context.Context, req *connect.Request[podiumv1.ScheduleServicePauseRequest]) (*connect.Response[podiumv1.ScheduleServicePauseResponse], error) {
	sc, err := s.mine(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	sc, err = s.store.SetSchedulePaused(ctx, sc.Name, true, nil)
	if err != nil {
		return nil, storeErr(sc.Name, err)
	}
	return connect.NewResponse(&podiumv1.ScheduleServicePauseResponse{Schedule: toProto(sc)}), nil
}

// Resume restarts a paused schedule from its first tick after now: ticks
// missed while paused are not caught up.
func (s *Service) Resume(ctx context.Context, req *connect.Request[podiumv1.ScheduleServiceResumeRequest]) (*connect.Response[podiumv1.ScheduleServiceResumeResponse], error) {
	sc, err := s.mine(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.ownerMay(ctx, sc, "resume"); err != nil {
		return nil, err
	}
	sched, loc, err := Parse(sc.Cron, sc.Timezone)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("schedule %s: stored %w", sc.Name, err))
	}
	next := Next(sched, loc, s.now())
	sc, err = s.store.SetSchedulePaused(ctx, sc.Name, false, &next)
	if err != nil {
		return nil, storeErr(sc.Name, err)
	}
	return connect.NewResponse(&podiumv1.ScheduleServiceResumeResponse{Schedule: toProto(sc)}), nil
}

// Remove removes a schedule; the tasks it created stay.
func (s *Service) Remove(ctx context.Context, req *connect.Request[podiumv1.ScheduleServiceRemoveRequest]) (*connect.Response[podiumv1.ScheduleServiceRemoveResponse], error) {
	sc, err := s.mine(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.store.RemoveSchedule(ctx, sc.Name); err != nil {
		return nil, storeErr(sc.Name, err)
	}
	return connect.NewResponse(&podiumv1.ScheduleServiceRemoveResponse{}), nil
}

// RunNow creates the schedule's task at once, whatever its overlap mode and
// without moving its next tick. The task is the schedule creator's, like
// every tick's, and so may use only the secrets they may; the audit log says
// who asked.
func (s *Service) RunNow(ctx context.Context, req *connect.Request[podiumv1.ScheduleServiceRunNowRequest]) (*connect.Response[podiumv1.ScheduleServiceRunNowResponse], error) {
	sc, err := s.mine(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.ownerMay(ctx, sc, "run"); err != nil {
		return nil, err
	}
	nt := s.defaults.Row(sc.Spec, sc.CreatedBy)
	nt.Audit = store.AuditFrom(ctx)
	if nt.Audit != nil {
		nt.Audit.Target = sc.Name
	}
	// The task is the owner's, so it uses what the owner may, whoever asks.
	if err := s.checkSecrets(ctx, sc.CreatedBy, sc.Spec); err != nil {
		return nil, err
	}
	// The tick is the moment asked, in microseconds as Postgres keeps it.
	fired, err := s.store.FireTick(ctx, store.Fire{ScheduleID: sc.ID, Tick: s.now().UTC().Truncate(time.Microsecond), RunNow: true, Task: nt})
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("run %s now: %w (try again)", sc.Name, err))
	}
	if fired.Task == nil {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf(
			"schedule %s was removed, or run now twice in the same instant; try again", sc.Name))
	}
	s.log.Info("schedule run now", "schedule", sc.Name, "task", fired.Task.ID)
	return connect.NewResponse(&podiumv1.ScheduleServiceRunNowResponse{Task: fired.Task.Proto()}), nil
}

// ownerMay refuses to resume or run (what) a schedule whose owner may not
// submit its spec now, as a tick would find (ownerMayNot): it would create a
// task as someone who may not, or be paused again at its next tick.
func (s *Service) ownerMay(ctx context.Context, sc store.Schedule, what string) error {
	why, err := ownerMayNot(ctx, s.store, s.bounds, sc)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("schedule %s: check its owner %s: %w (try again)", sc.Name, sc.CreatedBy, err))
	}
	if why != "" {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cannot %s schedule %s: %s", what, sc.Name, why))
	}
	return nil
}

func storeErr(name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("schedule %s was removed meanwhile", name))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("schedule %s: %w (try again)", name, err))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func toProto(sc store.Schedule) *podiumv1.Schedule {
	p := &podiumv1.Schedule{Id: sc.ID, Name: sc.Name, Cron: sc.Cron, Timezone: sc.Timezone, Spec: sc.Spec,
		Overlap: sc.Overlap, Paused: sc.Paused, PausedReason: sc.PausedReason, CreatedBy: sc.CreatedBy, CreatedAt: timestamppb.New(sc.CreatedAt),
		LastTaskId: deref(sc.LastTaskID)}
	if sc.NextRunAt != nil {
		p.NextRunAt = timestamppb.New(*sc.NextRunAt)
	}
	return p
}
